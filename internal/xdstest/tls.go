package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
)

// WithTLS makes the Upstream serve TLS with cfg (set ClientAuth and ClientCAs
// for mTLS) instead of plaintext.
func WithTLS(cfg *tls.Config) UpstreamOption {
	return func(o *upstreamOptions) { o.creds = credentials.NewTLS(cfg) }
}

// CA is a certificate authority for tests: an ECDSA P-256 self-signed root
// that issues server and client certificates valid for a day.
type CA struct {
	// Set at creation, read-only.
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// Cert is a certificate issued by a CA, with its key.
type Cert struct {
	// CertPEM and KeyPEM are the PEM certificate and PKCS#8 key.
	CertPEM, KeyPEM []byte
	// Leaf is the parsed certificate.
	Leaf *x509.Certificate
}

// NewCA creates a CA whose subject common name is name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("xdstest: CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("xdstest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("xdstest: CA certificate: %v", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// CertPEM is the CA's certificate in PEM.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server issues a server certificate for hosts (IP addresses or DNS names);
// none means "127.0.0.1".
func (ca *CA) Server(tb testing.TB, hosts ...string) Cert {
	tb.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tb, tmpl)
}

// Client issues a client certificate whose URI SANs are uris, e.g.
// "spiffe://example.org/ns/default/sa/envoy".
func (ca *CA) Client(tb testing.TB, uris ...string) Cert {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			tb.Fatalf("xdstest: client URI SAN %q: %v", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.issue(tb, tmpl)
}

func (ca *CA) issue(tb testing.TB, tmpl *x509.Certificate) Cert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("xdstest: key: %v", err)
	}
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("xdstest: certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("xdstest: certificate: %v", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("xdstest: key: %v", err)
	}
	return Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		Leaf:    leaf,
	}
}

// TLS returns c as a tls.Certificate.
func (c Cert) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		tb.Fatalf("xdstest: key pair: %v", err)
	}
	return pair
}

// Write writes c to dir as NAME.pem and NAME-key.pem, replacing them
// atomically (a rename) when they exist, and returns their paths.
func (c Cert) Write(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certFile = WriteFile(tb, dir, name+".pem", c.CertPEM)
	keyFile = WriteFile(tb, dir, name+"-key.pem", c.KeyPEM)
	return certFile, keyFile
}

// WriteFile writes data to dir/name through a temporary file and a rename,
// so that a reader sees the old content or the new one, and returns the path.
func WriteFile(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		tb.Fatalf("xdstest: write %s: %v", path, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		tb.Fatalf("xdstest: write %s: %v %v", path, werr, cerr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		tb.Fatalf("xdstest: write %s: %v", path, err)
	}
	return path
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatalf("xdstest: serial: %v", err)
	}
	return n
}
