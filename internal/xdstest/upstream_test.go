package xdstest_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// noResponse is how long a test waits to prove that nothing arrives.
const noResponse = 200 * time.Millisecond

func node(id, cluster string) *core.Node { return &core.Node{Id: id, Cluster: cluster} }

func TestUpstreamServesAndRecords(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.WithLogger(zaptest.NewLogger(t)))
	version := up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))

	c := xdstest.DialADS(t, up.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ListenerType, "svc")
	resp := c.RecvType(resource.ListenerType)
	if resp.GetVersionInfo() != version || len(resp.GetResources()) != 1 {
		t.Fatalf("LDS response: version %q with %d resources, want %q with 1", resp.GetVersionInfo(), len(resp.GetResources()), version)
	}
	var l listener.Listener
	if err := resp.GetResources()[0].UnmarshalTo(&l); err != nil || l.GetName() != "svc" {
		t.Fatalf("listener %q, err %v; want svc", l.GetName(), err)
	}
	c.Ack(resp)

	ack := up.WaitRequest(t, 1, "the LDS ACK", func(r xdstest.Request) bool {
		return r.Nonce() == resp.GetNonce()
	})
	first := up.Requests()[0]
	if first.SotW.GetNode().GetId() != "n1" || first.Node.GetId() != "n1" {
		t.Errorf("first request: node %v / stream node %v, want n1", first.SotW.GetNode(), first.Node)
	}
	if ack.SotW.GetNode() != nil || ack.Node.GetId() != "n1" {
		t.Errorf("ACK: node as sent %v (want nil), stream node %v (want n1)", ack.SotW.GetNode(), ack.Node)
	}
	if ack.StreamID != first.StreamID || !ack.IsADS() || ack.IsDelta() || ack.IsNACK() {
		t.Errorf("ACK recorded as %v, want an ADS SotW ACK on stream %d", ack, first.StreamID)
	}
	if ack.SotW.GetVersionInfo() != version {
		t.Errorf("ACK version %q, want %q", ack.SotW.GetVersionInfo(), version)
	}
	resps := up.Responses()
	if len(resps) != 1 || resps[0].StreamID != first.StreamID || resps[0].SotW.GetNonce() != resp.GetNonce() {
		t.Errorf("responses recorded: %v, want the one LDS response on stream %d", resps, first.StreamID)
	}
	if s := up.Stats(); s.OpenStreams != 1 || s.TotalStreams != 1 {
		t.Errorf("streams: %d open, %d total; want 1, 1", s.OpenStreams, s.TotalStreams)
	}
	c.Close()
	up.WaitStreams(t, 0)
}

func TestUpstreamBumpsOnlyChangedTypes(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	names := xdstest.NamesFor("svc")

	c := xdstest.DialADS(t, up.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ListenerType, names.Listener)
	c.Ack(c.RecvType(resource.ListenerType))
	c.Subscribe(resource.EndpointType, names.Endpoints)
	c.Ack(c.RecvType(resource.EndpointType))

	v2 := up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:2"))
	eds := c.RecvType(resource.EndpointType)
	if eds.GetVersionInfo() != v2 {
		t.Errorf("EDS version %q, want %q", eds.GetVersionInfo(), v2)
	}
	c.Ack(eds)
	c.ExpectNoResponse(noResponse) // LDS did not change: no push

	up.SetSnapshotVersion(xdstest.DefaultKey, "forced", xdstest.GRPCResources("svc", "127.0.0.1:2"))
	got := map[string]string{}
	for range 2 {
		r := c.MustRecv()
		got[r.GetTypeUrl()] = r.GetVersionInfo()
	}
	if got[resource.ListenerType] != "forced" || got[resource.EndpointType] != "forced" {
		t.Errorf("after SetSnapshotVersion got %v, want LDS and EDS at \"forced\"", got)
	}
}

func TestUpstreamNackRecorded(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	c := xdstest.DialADS(t, up.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ClusterType, xdstest.NamesFor("svc").Cluster)
	resp := c.RecvType(resource.ClusterType)
	c.Nack(resp, "bad cluster")
	nack := up.WaitRequest(t, 0, "a NACK", xdstest.Request.IsNACK)
	if nack.SotW.GetErrorDetail().GetMessage() != "bad cluster" || nack.SotW.GetVersionInfo() != "" ||
		nack.Nonce() != resp.GetNonce() {
		t.Errorf("NACK recorded as %v, want version \"\", nonce %q, message \"bad cluster\"", nack, resp.GetNonce())
	}
}

func TestUpstreamRestart(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	c := xdstest.DialADS(t, up.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ListenerType, "svc")
	c.Ack(c.RecvType(resource.ListenerType))
	addr := up.Addr()

	up.Restart()
	if code := status.Code(c.Err()); !ended(code) {
		t.Errorf("old stream ended with %v, want Unavailable", code)
	}
	if up.Addr() != addr {
		t.Errorf("address changed across Restart: %s → %s", addr, up.Addr())
	}
	c2 := xdstest.DialADS(t, addr, node("n2", "c1"))
	c2.Subscribe(resource.ListenerType, "svc")
	if r := c2.RecvType(resource.ListenerType); len(r.GetResources()) != 1 {
		t.Fatalf("after restart: %d listeners, want 1", len(r.GetResources()))
	}
	if s := up.Stats(); s.TotalStreams != 2 || s.OpenStreams != 1 {
		t.Errorf("streams: %d open, %d total; want 1, 2", s.OpenStreams, s.TotalStreams)
	}

	up.Stop()
	up.Stop() // idempotent
	if code := status.Code(c2.Err()); !ended(code) {
		t.Errorf("stream ended with %v after Stop, want Unavailable", code)
	}
}

// ended reports a status a stream may end with when its server stops: the
// transport closing (Unavailable) or, when the handler saw its context end
// first, what it returned (Unknown, Canceled).
func ended(code codes.Code) bool {
	return code == codes.Unavailable || code == codes.Unknown || code == codes.Canceled
}

func TestUpstreamKeyByCluster(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	up.SetSnapshot("blue", xdstest.GRPCResources("blue-svc", "127.0.0.1:1"))
	up.SetSnapshot("green", xdstest.GRPCResources("green-svc", "127.0.0.1:2"))

	for _, tc := range []struct{ cluster, want string }{{"blue", "blue-svc"}, {"green", "green-svc"}} {
		c := xdstest.DialADS(t, up.Addr(), node("n-"+tc.cluster, tc.cluster))
		c.Subscribe(resource.ListenerType) // wildcard
		r := c.RecvType(resource.ListenerType)
		var l listener.Listener
		if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(&l) != nil || l.GetName() != tc.want {
			t.Errorf("cluster %s got %v, want only listener %s", tc.cluster, r.GetResources(), tc.want)
		}
	}
}

func TestUpstreamDeltaRecorded(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	conn, err := grpc.NewClient(up.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DeltaDiscoveryRequest{
		Node:                   node("d1", "c1"),
		TypeUrl:                resource.ListenerType,
		ResourceNamesSubscribe: []string{"svc"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "svc" {
		t.Fatalf("delta response %v, want listener svc", resp.GetResources())
	}
	req := up.WaitRequest(t, 0, "the delta request", xdstest.Request.IsDelta)
	if req.Node.GetId() != "d1" || req.TypeURL() != resource.ListenerType || len(req.Names()) != 1 {
		t.Errorf("delta request recorded as %v", req)
	}
	up.MustWait(t, "the delta response", func(s xdstest.Stats) bool {
		return len(s.Responses) == 1 && s.Responses[0].Delta != nil && s.Responses[0].StreamID == req.StreamID
	})
	cancel()
	up.WaitStreams(t, 0)
}

func TestUpstreamWildcard(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.MergeResources(xdstest.GRPCResources("a", "127.0.0.1:1"), xdstest.GRPCResources("b", "127.0.0.1:2")))
	for _, names := range [][]string{nil, {"*"}} {
		c := xdstest.DialADS(t, up.Addr(), node("n", "c"))
		c.Subscribe(resource.ClusterType, names...)
		if r := c.RecvType(resource.ClusterType); len(r.GetResources()) != 2 {
			t.Errorf("CDS wildcard %q: %d clusters, want 2", names, len(r.GetResources()))
		}
	}
}
