package tlsconfig_test

import (
	"crypto/tls"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/credentials"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// fixedServer serves TLS with a fixed certificate; with clientCA, mTLS.
func fixedServer(t *testing.T, c xdstest.Cert, clientCA *xdstest.CA) *testServer {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{c.TLS(t)}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCA.Pool()
	}
	return startServer(t, credentials.NewTLS(cfg))
}

func clientCreds(t *testing.T, f tlsconfig.Files) credentials.TransportCredentials {
	t.Helper()
	c, err := tlsconfig.ClientCredentials(f, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("ClientCredentials: %v", err)
	}
	return c
}

func TestClientVerifiesServer(t *testing.T) {
	dir := t.TempDir()
	ca, other := xdstest.NewCA(t, "ca"), xdstest.NewCA(t, "other")
	creds := clientCreds(t, tlsconfig.Files{CAFile: xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())})

	mustServe(t, fixedServer(t, ca.Server(t), nil).addr, creds)
	mustRefuse(t, fixedServer(t, other.Server(t), nil).addr, creds)                // untrusted
	mustRefuse(t, fixedServer(t, ca.Server(t, "cp.example.org"), nil).addr, creds) // not for 127.0.0.1
	mustRefuse(t, fixedServer(t, ca.Client(t), nil).addr, creds)                   // not for server auth
}

func TestClientMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "ca")
	caFile := xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())
	cert, key := ca.Client(t, "spiffe://example.org/relay").Write(t, dir, "relay")
	ts := fixedServer(t, ca.Server(t), ca)

	mustRefuse(t, ts.addr, clientCreds(t, tlsconfig.Files{CAFile: caFile})) // no certificate
	creds := clientCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: caFile})
	mustServe(t, ts.addr, creds)
	if id := ts.lastIdentity(); id.spiffeID != "spiffe://example.org/relay" {
		t.Errorf("server saw %+v, want spiffe://example.org/relay", id)
	}

	// Rotation of the client certificate: the next handshake presents it.
	ca.Client(t, "spiffe://example.org/relay-2").Write(t, dir, "relay")
	mustServe(t, ts.addr, creds)
	if id := ts.lastIdentity(); id.spiffeID != "spiffe://example.org/relay-2" {
		t.Errorf("after rotation the server saw %+v, want spiffe://example.org/relay-2", id)
	}
}

// TestClientCARotation: the CA file is re-read for new handshakes.
func TestClientCARotation(t *testing.T) {
	dir := t.TempDir()
	ca, next := xdstest.NewCA(t, "ca"), xdstest.NewCA(t, "next")
	creds := clientCreds(t, tlsconfig.Files{CAFile: xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())})
	oldSrv, newSrv := fixedServer(t, ca.Server(t), nil), fixedServer(t, next.Server(t), nil)

	open := dial(t, oldSrv.addr, creds)
	if _, err := check(t, open); err != nil {
		t.Fatalf("server of the first CA: %v", err)
	}
	mustRefuse(t, newSrv.addr, creds)

	xdstest.WriteFile(t, dir, "ca.pem", next.CertPEM())
	mustServe(t, newSrv.addr, creds)
	mustRefuse(t, oldSrv.addr, creds)
	if _, err := check(t, open); err != nil {
		t.Errorf("connection open before the CA rotation: %v, want it up", err)
	}
}
