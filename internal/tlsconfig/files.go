package tlsconfig

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Role says what a file holds.
type Role int

const (
	// RoleCert is a PEM certificate chain, leaf first.
	RoleCert Role = iota
	// RoleKey is the PEM private key of the certificate.
	RoleKey
	// RoleCA is a PEM bundle of CA certificates that verify the peer.
	RoleCA
)

// String returns "certificate", "private key" or "CA".
func (r Role) String() string {
	switch r {
	case RoleCert:
		return "certificate"
	case RoleKey:
		return "private key"
	case RoleCA:
		return "CA"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// FileError is a problem with one file: missing, unreadable, not PEM, or (for
// RoleKey) a key that does not match the certificate.
type FileError struct {
	// Role is what the file should hold.
	Role Role
	// Path is the file's path as configured.
	Path string
	// Err is the cause.
	Err error
}

// Error formats e as "tlsconfig: ROLE file PATH: ERR".
func (e *FileError) Error() string {
	return fmt.Sprintf("tlsconfig: %s file %s: %v", e.Role, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// ErrKeyMismatch is the cause of a RoleKey FileError whose key is not the
// certificate's.
var ErrKeyMismatch = errors.New("private key does not match the certificate")

// LoadKeyPair reads a certificate chain and its private key. Every error is a
// *FileError naming the file at fault: the certificate file when it has no
// parsable certificate, the key file when the key does not parse or does not
// match (ErrKeyMismatch).
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &FileError{Role: RoleCert, Path: certFile, Err: err}
	}
	chain, err := parseCertificates(certPEM)
	if err != nil {
		return nil, &FileError{Role: RoleCert, Path: certFile, Err: err}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &FileError{Role: RoleKey, Path: keyFile, Err: err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The certificate parsed above, so the key is at fault.
		if mismatch(chain[0], keyPEM) {
			err = ErrKeyMismatch
		}
		return nil, &FileError{Role: RoleKey, Path: keyFile, Err: err}
	}
	pair.Leaf = chain[0]
	return &pair, nil
}

// LoadPool reads a PEM bundle of CA certificates. It is an error (a
// *FileError) when the file holds no certificate or one that does not parse.
func LoadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, &FileError{Role: RoleCA, Path: caFile, Err: err}
	}
	certs, err := parseCertificates(data)
	if err != nil {
		return nil, &FileError{Role: RoleCA, Path: caFile, Err: err}
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// mismatch reports whether keyPEM holds a private key that parses and is not
// the key of leaf.
func mismatch(leaf *x509.Certificate, keyPEM []byte) bool {
	for {
		var b *pem.Block
		b, keyPEM = pem.Decode(keyPEM)
		if b == nil {
			return false
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		var key any
		var err error
		if key, err = x509.ParsePKCS8PrivateKey(b.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
				if key, err = x509.ParseECPrivateKey(b.Bytes); err != nil {
					return false
				}
			}
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return false
		}
		pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
		return ok && !pub.Equal(leaf.PublicKey)
	}
}

// parseCertificates parses every CERTIFICATE block of data; other blocks are
// skipped. At least one certificate is required.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}
