package tlsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
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

// DefaultRefresh is how often ServerCredentials re-reads the files when not
// told (pemfile's default for gRPC's file_watcher).
const DefaultRefresh = 10 * time.Minute

// ServerCredentials returns gRPC server credentials that present the
// certificate of f and, when f.CAFile is set, require and verify a client
// certificate against it (mTLS). The files are read now, so that a bad one
// is an error here, then re-read every refresh (0: DefaultRefresh) by grpc's
// pemfile provider; close stops it. Session tickets are off, so that every
// connection is verified against the files of its own handshake.
func ServerCredentials(f Files, refresh time.Duration) (creds credentials.TransportCredentials, close func(), err error) {
	cfg, close, err := ServerConfig(f, refresh)
	if err != nil {
		return nil, nil, err
	}
	return credentials.NewTLS(cfg), close, nil
}

// ServerConfig is ServerCredentials as a crypto/tls config, for an HTTP
// listener (REST-JSON polling).
func ServerConfig(f Files, refresh time.Duration) (cfg *tls.Config, close func(), err error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, nil, errors.New("tlsconfig: a server needs a certificate file and a key file")
	}
	if _, err := LoadKeyPair(f.CertFile, f.KeyFile); err != nil {
		return nil, nil, err
	}
	if f.CAFile != "" {
		if _, err := LoadPool(f.CAFile); err != nil {
			return nil, nil, err
		}
	}
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	p, err := pemfile.NewProvider(pemfile.Options{CertFile: f.CertFile, KeyFile: f.KeyFile, RootFile: f.CAFile,
		RefreshDuration: refresh})
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: %w", err)
	}
	mtls := f.CAFile != ""
	cfg = &tls.Config{
		MinVersion:             tls.VersionTLS12,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			// The provider has loaded the files once before its first
			// answer; after that KeyMaterial returns the current material.
			km, err := p.KeyMaterial(hello.Context())
			if err != nil {
				return nil, fmt.Errorf("tlsconfig: %w", err)
			}
			c := &tls.Config{MinVersion: tls.VersionTLS12, SessionTicketsDisabled: true, Certificates: km.Certs}
			if mtls {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, km.Roots
			}
			return c, nil
		},
	}
	return cfg, p.Close, nil
}
