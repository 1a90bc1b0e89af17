package fleet_test

import (
	"context"
	"net"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"go.uber.org/zap/zaptest"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

var testSpec = fleet.Spec{Listeners: 1, Routes: 1, Clusters: 3, EndpointsPerCluster: 2, Style: fleet.StyleGRPC}

// startServer serves cfg on 127.0.0.1:0 until the test ends and returns a client connection to it.
func startServer(t *testing.T, cfg fleet.ServerConfig) (*fleet.Server, *grpc.ClientConn) {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := fleet.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, cc
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type recvResult[T any] struct {
	resp T
	err  error
}

// receiver pumps a stream's responses into a channel, so tests can wait with a timeout.
func receiver[T any](recv func() (T, error)) <-chan recvResult[T] {
	ch := make(chan recvResult[T], 16)
	go func() {
		defer close(ch)
		for {
			r, err := recv()
			ch <- recvResult[T]{r, err}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func next[T any](ctx context.Context, t *testing.T, ch <-chan recvResult[T]) T {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("receive: %v", r.err)
		}
		return r.resp
	case <-ctx.Done():
		t.Fatal("timed out waiting for a response")
	}
	panic("unreachable")
}

func stampOf(t *testing.T, m proto.Message) int64 {
	t.Helper()
	n, ok := fleet.CreatedUnixNano(m)
	if !ok {
		t.Fatalf("%T without stamp", m)
	}
	return n
}

func TestServerSotwChurnAndNACK(t *testing.T) {
	ctx := testContext(t)
	srv, cc := startServer(t, fleet.ServerConfig{Spec: testSpec, ChurnKinds: []fleet.Kind{fleet.Clusters}, ChurnCount: 2})
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	responses := receiver(st.Recv)
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: fleet.Clusters.TypeURL()}); err != nil {
		t.Fatalf("send: %v", err)
	}
	first := next(ctx, t, responses)
	if len(first.GetResources()) != testSpec.Clusters {
		t.Fatalf("first CDS response has %d clusters, want %d", len(first.GetResources()), testSpec.Clusters)
	}
	// NACK the first response: the server must not resend it.
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: fleet.Clusters.TypeURL(), ResponseNonce: first.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: "test NACK"}}); err != nil {
		t.Fatalf("send NACK: %v", err)
	}
	quiet, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	select {
	case r := <-responses:
		t.Fatalf("response after NACK without a change: %v", r)
	case <-quiet.Done():
	}

	c, err := srv.Change()
	if err != nil {
		t.Fatalf("Change: %v", err)
	}
	if c.Seq != 1 || c.Kind != fleet.Clusters || len(c.Names) != 2 || srv.Changes() != 1 {
		t.Fatalf("Change = %+v, Changes = %d", c, srv.Changes())
	}
	upd := next(ctx, t, responses)
	if upd.GetVersionInfo() == first.GetVersionInfo() {
		t.Errorf("update kept version %q", upd.GetVersionInfo())
	}
	// CDS is full state: every cluster, the changed ones with the change's stamp.
	changed := map[string]bool{}
	for _, n := range c.Names {
		changed[n] = true
	}
	if len(upd.GetResources()) != testSpec.Clusters {
		t.Fatalf("CDS update has %d clusters, want %d", len(upd.GetResources()), testSpec.Clusters)
	}
	for _, a := range upd.GetResources() {
		cl := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(cl); err != nil {
			t.Fatal(err)
		}
		if got := stampOf(t, cl) == c.Created.UnixNano(); got != changed[cl.GetName()] {
			t.Errorf("cluster %s: carries the change stamp = %v, want %v", cl.GetName(), got, changed[cl.GetName()])
		}
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: fleet.Clusters.TypeURL(), VersionInfo: upd.GetVersionInfo(),
		ResponseNonce: upd.GetNonce()}); err != nil {
		t.Fatalf("send ACK: %v", err)
	}
	// The next change wraps around the three clusters.
	c2, err := srv.Change()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{fleet.ClusterName(2), fleet.ClusterName(0)}; c2.Names[0] != want[0] || c2.Names[1] != want[1] {
		t.Errorf("second change names %v, want %v", c2.Names, want)
	}
	next(ctx, t, responses)
	_ = st.CloseSend()
}

func TestServerDeltaEDS(t *testing.T) {
	ctx := testContext(t)
	srv, cc := startServer(t, fleet.ServerConfig{Spec: testSpec})
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	responses := receiver(st.Recv)
	want := []string{fleet.ClusterName(0), fleet.ClusterName(1)}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: fleet.Endpoints.TypeURL(),
		ResourceNamesSubscribe: want}); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := map[string]string{} // name → version
	for len(got) < len(want) {
		r := next(ctx, t, responses)
		for _, res := range r.GetResources() {
			got[res.GetName()] = res.GetVersion()
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	// Default churn: one ClusterLoadAssignment per change, in order.
	c, err := srv.Change()
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != fleet.Endpoints || len(c.Names) != 1 || c.Names[0] != want[0] {
		t.Fatalf("Change = %+v", c)
	}
	r := next(ctx, t, responses)
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != want[0] {
		t.Fatalf("delta update %v, want only %s", r.GetResources(), want[0])
	}
	res := r.GetResources()[0]
	if res.GetVersion() == got[want[0]] {
		t.Errorf("resource version unchanged: %s", res.GetVersion())
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := res.GetResource().UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if stampOf(t, cla) != c.Created.UnixNano() {
		t.Errorf("stamp %d, want %d", stampOf(t, cla), c.Created.UnixNano())
	}
	_ = st.CloseSend()
}

func TestServerChurnLoop(t *testing.T) {
	ctx := testContext(t)
	srv, cc := startServer(t, fleet.ServerConfig{Spec: testSpec, Churn: 200, ChurnKinds: []fleet.Kind{fleet.Endpoints}})
	// The per-type EDS service; requests there may leave the type URL out.
	st, err := endpointservice.NewEndpointDiscoveryServiceClient(cc).StreamEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	responses := receiver(st.Recv)
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"},
		ResourceNames: []string{fleet.ClusterName(0), fleet.ClusterName(1), fleet.ClusterName(2)}}); err != nil {
		t.Fatal(err)
	}
	// Without any explicit Change, the churn loop keeps sending updates.
	for range 3 {
		r := next(ctx, t, responses)
		if r.GetTypeUrl() != fleet.Endpoints.TypeURL() {
			t.Fatalf("EDS service answered with %s", r.GetTypeUrl())
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(),
			ResponseNonce: r.GetNonce(), ResourceNames: []string{fleet.ClusterName(0), fleet.ClusterName(1), fleet.ClusterName(2)}}); err != nil {
			t.Fatal(err)
		}
	}
	if srv.Changes() == 0 {
		t.Error("no changes counted")
	}
	_ = st.CloseSend()
}

func TestServerConfigErrors(t *testing.T) {
	for _, cfg := range []fleet.ServerConfig{
		{},
		{Spec: testSpec, Churn: -1},
		{Spec: testSpec, ChurnCount: -2},
		{Spec: testSpec, ChurnKinds: []fleet.Kind{7}},
	} {
		if _, err := fleet.NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) succeeded", cfg)
		}
	}
}

func TestServeTwice(t *testing.T) {
	srv, err := fleet.NewServer(fleet.ServerConfig{Spec: testSpec})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Serve(ctx, lis); err != nil {
		t.Fatalf("Serve with a done context: %v", err)
	}
	if err := srv.Serve(ctx, lis); err == nil {
		t.Fatal("second Serve succeeded")
	}
}
