package tlsconfig_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := xdstest.NewCA(t, "ca"), xdstest.NewCA(t, "other")
	cert, key := ca.Server(t).Write(t, dir, "server")
	ts := startServer(t, serverCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key}))

	mustRefuse(t, ts.addr, nil)                     // plaintext
	mustRefuse(t, ts.addr, clientTLS(other.Pool())) // a CA that did not sign the server's certificate
	mustServe(t, ts.addr, clientTLS(ca.Pool()))     // TLS without a client certificate
	if id := ts.lastIdentity(); id.ok || id.spiffeID != "" || id.uris != nil {
		t.Errorf("PeerIdentity without a client certificate = %+v, want nothing", id)
	}
	// A client certificate the server did not ask for is not an identity.
	mustServe(t, ts.addr, clientTLS(ca.Pool(), ca.Client(t, "spiffe://example.org/a").TLS(t)))
	if id := ts.lastIdentity(); id.ok {
		t.Errorf("PeerIdentity on a server without client CA = %+v, want ok false", id)
	}
}

func TestServerMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := xdstest.NewCA(t, "ca"), xdstest.NewCA(t, "other")
	cert, key := ca.Server(t).Write(t, dir, "server")
	clientCA := xdstest.WriteFile(t, dir, "clients-ca.pem", ca.CertPEM())
	ts := startServer(t, serverCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: clientCA}))

	mustRefuse(t, ts.addr, nil)
	mustRefuse(t, ts.addr, clientTLS(ca.Pool()))                                                      // no certificate
	mustRefuse(t, ts.addr, clientTLS(ca.Pool(), other.Client(t, "spiffe://example.org/evil").TLS(t))) // wrong CA
	mustRefuse(t, ts.addr, clientTLS(ca.Pool(), ca.Server(t).TLS(t)))                                 // not for client auth

	tests := []struct {
		name string
		uris []string
		want identity
	}{
		{"spiffe", []string{"spiffe://example.org/ns/default/sa/envoy"},
			identity{"spiffe://example.org/ns/default/sa/envoy", []string{"spiffe://example.org/ns/default/sa/envoy"}, true}},
		{"malformed SPIFFE ID", []string{"spiffe://Example.org/a"},
			identity{"", []string{"spiffe://Example.org/a"}, true}},
		{"two URIs: no SPIFFE ID", []string{"spiffe://example.org/a", "https://example.org/b"},
			identity{"", []string{"spiffe://example.org/a", "https://example.org/b"}, true}},
		{"not spiffe", []string{"https://example.org/b"}, identity{"", []string{"https://example.org/b"}, true}},
		{"no URI", nil, identity{"", nil, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustServe(t, ts.addr, clientTLS(ca.Pool(), ca.Client(t, tt.uris...).TLS(t)))
			got := ts.lastIdentity()
			if got.ok != tt.want.ok || got.spiffeID != tt.want.spiffeID || !slices.Equal(got.uris, tt.want.uris) {
				t.Errorf("PeerIdentity = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPeerIdentityWithoutPeer(t *testing.T) {
	if id, uris, ok := tlsconfig.PeerIdentity(context.Background()); ok || id != "" || uris != nil {
		t.Errorf("PeerIdentity(no peer) = %q %v %v, want nothing", id, uris, ok)
	}
}

// TestServerCertRotation: new handshakes get the new certificate, the open
// connection keeps working on the old one.
func TestServerCertRotation(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "ca")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	ts := startServer(t, serverCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key}))

	old := dial(t, ts.addr, clientTLS(ca.Pool()))
	if leaf, err := check(t, old); err != nil || !leaf.Equal(first.Leaf) {
		t.Fatalf("first call: %v, %v; want the first certificate", leaf, err)
	}

	second := ca.Server(t)
	second.Write(t, dir, "server") // atomic renames: cert, then key
	eventually(t, "new connections get the second certificate", func() bool {
		return serves(t, ts.addr, clientTLS(ca.Pool()), second.Leaf)
	})
	if leaf, err := check(t, old); err != nil || !leaf.Equal(first.Leaf) {
		t.Errorf("open connection after rotation: %v, %v; want it up on the first certificate", leaf, err)
	}
}

// TestServerRotationInPlace writes the files in place, one after the other:
// between the writes the pair does not match and the old one stays in use.
func TestServerRotationInPlace(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "ca")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	ts := startServer(t, serverCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key}))
	mustServe(t, ts.addr, clientTLS(ca.Pool()))

	second := ca.Server(t, "127.0.0.1", "relay.example.org")
	if err := os.WriteFile(cert, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	steady(t, "with the new certificate and the old key, the first pair", func() bool {
		return serves(t, ts.addr, clientTLS(ca.Pool()), first.Leaf)
	})
	if err := os.WriteFile(key, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "after both writes, the second certificate", func() bool {
		return serves(t, ts.addr, clientTLS(ca.Pool()), second.Leaf)
	})
	// A deleted file keeps the last good pair too.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	steady(t, "after the key file was removed, the second certificate", func() bool {
		return serves(t, ts.addr, clientTLS(ca.Pool()), second.Leaf)
	})
}

// TestServerClientCARotation: a new client CA file applies to new handshakes.
func TestServerClientCARotation(t *testing.T) {
	dir := t.TempDir()
	ca, next := xdstest.NewCA(t, "ca"), xdstest.NewCA(t, "next")
	cert, key := ca.Server(t).Write(t, dir, "server")
	clientCA := xdstest.WriteFile(t, dir, "clients-ca.pem", ca.CertPEM())
	ts := startServer(t, serverCreds(t, tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: clientCA}))

	oldClient := clientTLS(ca.Pool(), ca.Client(t, "spiffe://example.org/old").TLS(t))
	newClient := clientTLS(ca.Pool(), next.Client(t, "spiffe://example.org/new").TLS(t))
	open := dial(t, ts.addr, oldClient)
	if _, err := check(t, open); err != nil {
		t.Fatalf("client of the first CA: %v", err)
	}
	mustRefuse(t, ts.addr, newClient)

	xdstest.WriteFile(t, dir, "clients-ca.pem", next.CertPEM())
	eventually(t, "a client of the new CA is served", func() bool { return serves(t, ts.addr, newClient, nil) })
	if id := ts.lastIdentity(); id.spiffeID != "spiffe://example.org/new" {
		t.Errorf("PeerIdentity = %+v, want spiffe://example.org/new", id)
	}
	mustRefuse(t, ts.addr, oldClient)
	if _, err := check(t, open); err != nil {
		t.Errorf("connection open before the CA rotation: %v, want it up", err)
	}
}
