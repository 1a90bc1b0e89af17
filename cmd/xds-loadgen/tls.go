package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// TLSFiles are the PEM files of a TLS connection to the target.
type TLSFiles struct {
	// CAFile verifies the server; empty means the system roots.
	CAFile string
	// CertFile and KeyFile are the clients' certificate and key (mTLS); both
	// or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the server's certificate must carry
	// (default: the target's host).
	ServerName string
}

// credentials reads the files into gRPC transport credentials.
func (f *TLSFiles) credentials() (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("loadgen: tls CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("loadgen: tls CA %s: no PEM certificate", f.CAFile)
		}
	}
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return nil, errors.New("loadgen: --tls-cert and --tls-key go together")
	case f.CertFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loadgen: tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}
