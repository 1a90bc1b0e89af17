package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// Files names the PEM files of one TLS endpoint.
type Files struct {
	// CertFile and KeyFile are this side's certificate chain (leaf first) and
	// its private key. Both or neither: a server needs them; a client sends
	// them when the server asks (mTLS).
	CertFile string
	KeyFile  string
	// CAFile holds the CA certificates that verify the peer. On a server, set
	// means clients must present a certificate signed by one of them (mTLS).
	// On a client, empty means the system roots.
	CAFile string
}

// Source holds the current material read from Files and reloads it when the
// files change. Create it with NewSource.
type Source struct {
	// set at creation, read-only
	files Files
	log   *zap.Logger

	mu     sync.Mutex
	pair   watched[*tls.Certificate] // guarded by mu; zero when no CertFile
	roots  watched[*x509.CertPool]   // guarded by mu; zero when no CAFile
	server *tls.Config               // guarded by mu; built from pair and roots, nil after a reload
}

// NewSource reads the files named by f, so that a bad file is an error now
// rather than at the first handshake. log receives reloads at Info and failed
// reloads at Warn; nil means zap.NewNop().
func NewSource(f Files, log *zap.Logger) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("tlsconfig: a certificate file and a key file go together")
	}
	s := &Source{files: f, log: log}
	if f.CertFile != "" {
		s.pair = watched[*tls.Certificate]{
			paths: []string{f.CertFile, f.KeyFile},
			load:  func() (*tls.Certificate, error) { return LoadKeyPair(f.CertFile, f.KeyFile) },
		}
		if _, err := s.pair.refresh(); err != nil {
			return nil, err
		}
	}
	if f.CAFile != "" {
		s.roots = watched[*x509.CertPool]{
			paths: []string{f.CAFile},
			load:  func() (*x509.CertPool, error) { return LoadPool(f.CAFile) },
		}
		if _, err := s.roots.refresh(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Files returns the files s reads.
func (s *Source) Files() Files { return s.files }

// Certificate returns the current certificate and key, re-reading the files
// if they changed (a stat of each file per call); nil when s has no
// CertFile. The result is shared: callers must not modify it.
func (s *Source) Certificate() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	return s.pair.val
}

// Roots returns the current CA pool, re-reading the file if it changed; nil
// when s has no CAFile. The result is shared: callers must not modify it.
func (s *Source) Roots() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	return s.roots.val
}

// refreshLocked reloads what changed and drops the derived server config
// when anything did.
func (s *Source) refreshLocked() {
	for _, w := range []interface {
		refresh() (bool, error)
	}{&s.pair, &s.roots} {
		changed, err := w.refresh()
		switch {
		case err != nil:
			// Logged once per state of the files: refresh does not retry
			// until they change again.
			s.log.Warn("tls files changed but could not be loaded; keeping the previous ones", zap.Error(err))
		case changed:
			s.server = nil
			s.logReload()
		}
	}
}

func (s *Source) logReload() {
	fields := []zap.Field{zap.String("cert_file", s.files.CertFile), zap.String("ca_file", s.files.CAFile)}
	if p := s.pair.val; p != nil && p.Leaf != nil {
		fields = append(fields, zap.String("serial", p.Leaf.SerialNumber.String()), zap.Time("not_after", p.Leaf.NotAfter))
	}
	s.log.Info("tls files reloaded", fields...)
}

// ServerConfig returns a server configuration that presents the current
// certificate and, when CAFile is set, requires and verifies a client
// certificate against the current CA pool. It needs CertFile and KeyFile.
// Session tickets are off, so that every connection is verified against the
// files of its own handshake.
func (s *Source) ServerConfig() (*tls.Config, error) {
	if s.files.CertFile == "" {
		return nil, errors.New("tlsconfig: a server needs a certificate file and a key file")
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS12,
		SessionTicketsDisabled: true,
		GetConfigForClient:     func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.serverConfig(), nil },
	}, nil
}

// serverConfig returns the configuration of one handshake, rebuilt only when
// the files changed. Callers must not modify it.
func (s *Source) serverConfig() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	if s.server == nil {
		c := &tls.Config{
			MinVersion:             tls.VersionTLS12,
			SessionTicketsDisabled: true,
			Certificates:           []tls.Certificate{*s.pair.val},
		}
		if s.roots.val != nil {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = s.roots.val
		}
		s.server = c
	}
	return s.server
}

// ClientConfig returns a client configuration with the material of now: it
// verifies the server against the current CA pool (the system roots without
// CAFile) as crypto/tls does, and presents the current certificate when the
// server asks for one (CertFile set). Call it for each connection, as
// ClientCredentials does for each handshake, so that a new CA file is used.
func (s *Source) ClientConfig() *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    s.Roots(),
	}
	if s.files.CertFile != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.Certificate(), nil
		}
	}
	return c
}

// ServerCredentials returns gRPC server credentials built on
// NewSource(f, log).ServerConfig().
func ServerCredentials(f Files, log *zap.Logger) (credentials.TransportCredentials, error) {
	s, err := NewSource(f, log)
	if err != nil {
		return nil, err
	}
	c, err := s.ServerConfig()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(c), nil
}

// ClientCredentials returns gRPC client credentials that make every
// handshake with a fresh NewSource(f, log).ClientConfig(): grpc's own TLS
// credentials (ALPN h2, the server name from the dialed authority) over the
// files of the moment.
func ClientCredentials(f Files, log *zap.Logger) (credentials.TransportCredentials, error) {
	s, err := NewSource(f, log)
	if err != nil {
		return nil, err
	}
	return &clientCreds{s: s}, nil
}

// clientCreds are gRPC client credentials over a Source.
type clientCreds struct {
	s *Source // set at creation, read-only
}

// ClientHandshake does the TLS handshake with the configuration of now.
func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.s.ClientConfig()).ClientHandshake(ctx, authority, conn)
}

// ServerHandshake fails: these are client credentials.
func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconfig: client credentials used by a server")
}

// Info describes TLS, as grpc's own credentials do.
func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

// Clone returns credentials over the same Source.
func (c *clientCreds) Clone() credentials.TransportCredentials { return &clientCreds{s: c.s} }

// OverrideServerName is not supported (grpc.WithAuthority sets the name).
func (c *clientCreds) OverrideServerName(string) error {
	return errors.New("tlsconfig: OverrideServerName is not supported; use grpc.WithAuthority")
}

// watched is a value loaded from files, reloaded when their stamps change.
// The zero value (no paths) never loads anything.
type watched[T any] struct {
	paths  []string
	load   func() (T, error)
	val    T
	stamps []stamp // of the files val was loaded from
	failed []stamp // of the files the last failed load saw; not retried
}

// refresh reloads the value when a file's stamp changed since the last load
// (or the last failed attempt). It reports whether the value changed, or the
// error of a failed reload; the previous value is kept then.
func (w *watched[T]) refresh() (bool, error) {
	if len(w.paths) == 0 {
		return false, nil
	}
	// Stat before reading: a change after the stat is seen again next time.
	now := make([]stamp, len(w.paths))
	for i, p := range w.paths {
		now[i] = stampOf(p)
	}
	if sameStamps(now, w.stamps) || sameStamps(now, w.failed) {
		return false, nil
	}
	v, err := w.load()
	if err != nil {
		w.failed = now
		return false, err
	}
	w.val, w.stamps, w.failed = v, now, nil
	return true, nil
}

// stamp identifies one state of a file: which file (inode, so that a rename
// or a Kubernetes symlink swap counts), its size and modification time.
type stamp struct {
	fi  os.FileInfo // nil when stat failed
	err string
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: err.Error()}
	}
	return stamp{fi: fi}
}

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x.fi == nil || y.fi == nil:
			if x.fi != y.fi || x.err != y.err {
				return false
			}
		case !os.SameFile(x.fi, y.fi) || x.fi.Size() != y.fi.Size() || !x.fi.ModTime().Equal(y.fi.ModTime()):
			return false
		}
	}
	return true
}
