package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 10 * time.Second

// identity is what tlsconfig.PeerIdentity returned in the server.
type identity struct {
	spiffeID string
	uris     []string
	ok       bool
}

// testServer is a gRPC health server on 127.0.0.1 that records the
// PeerIdentity of its last call.
type testServer struct {
	addr string

	mu   sync.Mutex
	last identity // guarded by mu
}

// startServer serves with creds until the test ends.
func startServer(t *testing.T, creds credentials.TransportCredentials) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			id, uris, ok := tlsconfig.PeerIdentity(ctx)
			ts.mu.Lock()
			ts.last = identity{id, uris, ok}
			ts.mu.Unlock()
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ts
}

func (ts *testServer) lastIdentity() identity {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.last
}

// dial connects to addr with creds (nil: plaintext); closed when the test ends.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// check makes one call on conn and returns the server's leaf certificate (nil
// on plaintext) or the call's error.
func check(t *testing.T, conn *grpc.ClientConn) (*x509.Certificate, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		return info.State.PeerCertificates[0], nil
	}
	return nil, nil
}

// mustServe makes a call on a new connection with creds and returns the
// server's leaf certificate.
func mustServe(t *testing.T, addr string, creds credentials.TransportCredentials) *x509.Certificate {
	t.Helper()
	leaf, err := check(t, dial(t, addr, creds))
	if err != nil {
		t.Fatalf("call to %s: %v", addr, err)
	}
	return leaf
}

// mustRefuse makes a call on a new connection with creds and fails the test
// if it succeeds.
func mustRefuse(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	if _, err := check(t, dial(t, addr, creds)); err == nil {
		t.Fatalf("call to %s succeeded, want it refused", addr)
	}
}

// clientTLS is client credentials from a fixed tls.Config.
func clientTLS(roots *x509.CertPool, certs ...tls.Certificate) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
}

// refresh is how often the servers of these tests re-read their files.
const refresh = 20 * time.Millisecond

// serverCreds is tlsconfig.ServerCredentials or a test failure; the
// provider stops when the test ends.
func serverCreds(t *testing.T, f tlsconfig.Files) credentials.TransportCredentials {
	t.Helper()
	c, stop, err := tlsconfig.ServerCredentials(f, refresh)
	if err != nil {
		t.Fatalf("ServerCredentials: %v", err)
	}
	t.Cleanup(stop)
	return c
}

// eventually retries f on new connections until it reports true, or fails
// the test after waitTimeout.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for !f() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not after %v", what, waitTimeout)
		case <-time.After(refresh):
		}
	}
}

// steady checks f on new connections for ten refresh intervals: a re-read
// that should change nothing has had the time to happen.
func steady(t *testing.T, what string, f func() bool) {
	t.Helper()
	end := time.Now().Add(10 * refresh)
	for time.Now().Before(end) {
		if !f() {
			t.Fatalf("%s: changed", what)
		}
		time.Sleep(refresh / 2)
	}
}

// serves reports whether a call on a new connection with creds succeeds and,
// when want is set, the server presented want.
func serves(t *testing.T, addr string, creds credentials.TransportCredentials, want *x509.Certificate) bool {
	t.Helper()
	leaf, err := check(t, dial(t, addr, creds))
	return err == nil && (want == nil || leaf.Equal(want))
}

// poolOf is a pool of the CAs' certificates.
func poolOf(cas ...*xdstest.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AppendCertsFromPEM(ca.CertPEM())
	}
	return p
}
