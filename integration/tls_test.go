package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// tlsStream is one downstream ADS stream to the relay over TLS (or
// plaintext), subscribed to CDS.
type tlsStream struct {
	t      *testing.T
	stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

// openCDS opens an ADS stream to addr with creds (nil: plaintext), subscribes
// to the cluster name and returns the stream with its first response, or
// the error that ended the attempt (a refused handshake). The stream and its
// connection end with the test.
func openCDS(t *testing.T, addr string, creds credentials.TransportCredentials, name string) (*tlsStream, *discoverygrpc.DiscoveryResponse, error) {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, nil, err
	}
	s := &tlsStream{t: t, stream: stream}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{
		Node:          &core.Node{Id: "tls-client"},
		TypeUrl:       resource.ClusterType,
		ResourceNames: []string{name},
	}); err != nil {
		return nil, nil, err
	}
	resp, err := s.recv()
	if err != nil {
		return nil, nil, err
	}
	return s, resp, nil
}

// recv waits (WaitTimeout) for the next response.
func (s *tlsStream) recv() (*discoverygrpc.DiscoveryResponse, error) {
	type result struct {
		resp *discoverygrpc.DiscoveryResponse
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := s.stream.Recv()
		ch <- result{r, err}
	}()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-time.After(xdstest.WaitTimeout):
		s.t.Fatalf("no response within %v", xdstest.WaitTimeout)
		return nil, nil
	}
}

// ack acknowledges resp.
func (s *tlsStream) ack(resp *discoverygrpc.DiscoveryResponse, name string) {
	s.t.Helper()
	if err := s.stream.Send(&discoverygrpc.DiscoveryRequest{
		TypeUrl:       resource.ClusterType,
		ResourceNames: []string{name},
		VersionInfo:   resp.GetVersionInfo(),
		ResponseNonce: resp.GetNonce(),
	}); err != nil {
		s.t.Fatalf("ack: %v", err)
	}
}

// serverLeaf is the certificate the relay presented on this stream.
func (s *tlsStream) serverLeaf() *x509.Certificate {
	s.t.Helper()
	p, ok := peer.FromContext(s.stream.Context())
	if !ok {
		s.t.Fatal("stream has no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		s.t.Fatalf("stream is not TLS: %T", p.AuthInfo)
	}
	return info.State.PeerCertificates[0]
}

// edsService is the EDS service name of the cluster in resp (which must hold
// exactly one cluster).
func edsService(t *testing.T, resp *discoverygrpc.DiscoveryResponse) string {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("response has %d resources, want 1", len(resp.GetResources()))
	}
	var c cluster.Cluster
	if err := resp.GetResources()[0].UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	return c.GetEdsClusterConfig().GetServiceName()
}

// tlsClientCreds is TLS client credentials trusting roots, with certs as the
// client certificate.
func tlsClientCreds(roots *x509.CertPool, certs ...tls.Certificate) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
}

// tlsRelay starts a relay whose downstream listener serves the files.
func tlsRelay(t *testing.T, upstreamAddr string, files config.TLS) string {
	t.Helper()
	return xdstest.StartRelayLogged(t, zaptest.NewLogger(t), upstreamAddr,
		xdstest.WithConfig(func(c *config.Config) { c.TLS = &files })).Addr()
}

func TestDownstreamTLS(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	dir := t.TempDir()
	ca, other := xdstest.NewCA(t, "relay-ca"), xdstest.NewCA(t, "other-ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	addr := tlsRelay(t, up.Addr(), config.TLS{CertFile: cert, KeyFile: key})

	if _, _, err := openCDS(t, addr, nil, "c1"); err == nil {
		t.Error("plaintext client got an answer from a TLS relay")
	}
	if _, _, err := openCDS(t, addr, tlsClientCreds(other.Pool()), "c1"); err == nil {
		t.Error("client trusting another CA got an answer")
	}
	_, resp, err := openCDS(t, addr, tlsClientCreds(ca.Pool()), "c1")
	if err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	if got := edsService(t, resp); got != "e1" {
		t.Errorf("cluster c1 has EDS service %q, want e1", got)
	}
}

func TestDownstreamMTLS(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	dir := t.TempDir()
	ca, other := xdstest.NewCA(t, "relay-ca"), xdstest.NewCA(t, "other-ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	clientCA := xdstest.WriteFile(t, dir, "clients-ca.pem", ca.CertPEM())
	addr := tlsRelay(t, up.Addr(), config.TLS{CertFile: cert, KeyFile: key, ClientCAFile: clientCA})

	if _, _, err := openCDS(t, addr, tlsClientCreds(ca.Pool()), "c1"); err == nil {
		t.Error("client without a certificate got an answer from an mTLS relay")
	}
	if _, _, err := openCDS(t, addr, tlsClientCreds(ca.Pool(), other.Client(t, "spiffe://example.org/evil").TLS(t)), "c1"); err == nil {
		t.Error("client with a certificate of another CA got an answer")
	}
	_, resp, err := openCDS(t, addr, tlsClientCreds(ca.Pool(), ca.Client(t, "spiffe://example.org/ns/default/sa/envoy").TLS(t)), "c1")
	if err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	if got := edsService(t, resp); got != "e1" {
		t.Errorf("cluster c1 has EDS service %q, want e1", got)
	}
}

// TestDownstreamCertRotation: rewriting the certificate files keeps open
// streams up (they still get updates) and new connections get the new
// certificate.
func TestDownstreamCertRotation(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "relay-ca")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	addr := tlsRelay(t, up.Addr(), config.TLS{CertFile: cert, KeyFile: key, RefreshInterval: 20 * time.Millisecond})

	old, resp, err := openCDS(t, addr, tlsClientCreds(ca.Pool()), "c1")
	if err != nil {
		t.Fatalf("first client: %v", err)
	}
	old.ack(resp, "c1")
	if !old.serverLeaf().Equal(first.Leaf) {
		t.Fatal("first client did not see the first certificate")
	}

	second := ca.Server(t)
	second.Write(t, dir, "server")
	// The files are re-read every refresh_interval: new connections get the
	// second certificate once that has passed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var fresh *tlsStream
	for {
		fresh, resp, err = openCDS(t, addr, tlsClientCreds(ca.Pool()), "c1")
		if err != nil {
			t.Fatalf("client after rotation: %v", err)
		}
		if fresh.serverLeaf().Equal(second.Leaf) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("clients after rotation still see serial %v, want the second certificate %v",
				fresh.serverLeaf().SerialNumber, second.Leaf.SerialNumber)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := edsService(t, resp); got != "e1" {
		t.Errorf("client after rotation: EDS service %q, want e1", got)
	}

	// The stream opened before the rotation is still up and gets updates.
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e2")}})
	resp, err = old.recv()
	if err != nil {
		t.Fatalf("stream opened before the rotation: %v", err)
	}
	if got := edsService(t, resp); got != "e2" {
		t.Errorf("stream opened before the rotation: EDS service %q, want e2", got)
	}
	if !old.serverLeaf().Equal(first.Leaf) {
		t.Error("stream opened before the rotation changed certificate")
	}
}

// TestUpstreamTLS: the relay reaches a go-control-plane upstream over TLS and
// over mTLS (channel_creds type tls); without its client certificate, an mTLS
// upstream never sees a stream from it.
func TestUpstreamTLS(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "upstream-ca")
	caFile := xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())
	relayCert, relayKey := ca.Client(t, "spiffe://example.org/xds-relay").Write(t, dir, "relay")
	serverCert := ca.Server(t).TLS(t)

	tests := []struct {
		name       string
		clientAuth bool           // the upstream requires a client certificate
		creds      map[string]any // the relay's channel_creds config
		served     bool           // the downstream client gets the cluster
	}{
		{"tls", false, map[string]any{"ca_certificate_file": caFile}, true},
		{"mtls", true, map[string]any{"ca_certificate_file": caFile, "certificate_file": relayCert, "private_key_file": relayKey}, true},
		{"mtls without client certificate", true, map[string]any{"ca_certificate_file": caFile}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
			if tt.clientAuth {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = ca.Pool()
			}
			up := xdstest.StartUpstream(t, xdstest.WithTLS(cfg))
			up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
			r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "tls", Config: tt.creds}}
			}))

			client := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "plain-client"})
			client.Subscribe(resource.ClusterType, "c1")
			if !tt.served {
				client.ExpectNoResponse(500 * time.Millisecond)
				if n := up.TotalStreams(); n != 0 {
					t.Errorf("upstream saw %d streams from a relay without a client certificate, want 0", n)
				}
				return
			}
			resp := client.RecvType(resource.ClusterType)
			if got := edsService(t, resp); got != "e1" {
				t.Errorf("EDS service %q, want e1", got)
			}
		})
	}
}

// TestUpstreamCallCreds: with call_creds of type jwt_token_file (gRFC A97),
// every stream to the upstream carries the token of the file as
// "authorization: Bearer TOKEN", over TLS.
func TestUpstreamCallCreds(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "upstream-ca")
	caFile := xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())
	enc := base64.RawURLEncoding.EncodeToString
	token := enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		enc(fmt.Appendf(nil, `{"sub":"xds-relay","exp":%d}`, time.Now().Add(time.Hour).Unix())) + "." + enc([]byte("sig"))
	tokenFile := xdstest.WriteFile(t, dir, "token.jwt", []byte(token))

	up := xdstest.StartUpstream(t, xdstest.WithTLS(&tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS(t)},
		MinVersion: tls.VersionTLS12}))
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "alts"},
			{Type: "tls", Config: map[string]any{"ca_certificate_file": caFile}}}
		c.Upstream.XDSServers[0].CallCreds = []config.CallCreds{{Type: "sts"},
			{Type: "jwt_token_file", Config: map[string]any{"jwt_token_file": tokenFile}}}
	}))
	client := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "plain-client"})
	client.Subscribe(resource.ClusterType, "c1")
	if got := edsService(t, client.RecvType(resource.ClusterType)); got != "e1" {
		t.Errorf("EDS service %q, want e1", got)
	}
	reqs := up.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	for _, req := range reqs {
		if got := req.Header.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+token {
			t.Errorf("stream %d authorization = %q, want the bearer token of the file", req.StreamID, got)
		}
	}
}
