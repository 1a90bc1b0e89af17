package relay_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The relay serves LRS on its xDS listener, with the xDS authorization (a
// client reports the load of the clusters it may subscribe to), and sends
// the sum to its default server presenting its own node.
func TestLoadReportsReachDefaultServer(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := xdstest.StartRelay(t, u.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{Rules: []config.AuthzRule{{Names: []string{"c1"}}}}
	}))
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		st, err := lrsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stats := func(cluster string) *endpointv3.ClusterStats {
			return &endpointv3.ClusterStats{ClusterName: cluster, UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{
				{Locality: &corev3.Locality{Zone: "z"}, TotalSuccessfulRequests: 5, TotalIssuedRequests: 5}}}
		}
		if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: id}, ClusterStats: []*endpointv3.ClusterStats{
			stats("c1"), stats("denied")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("client %s: no LoadStatsResponse: %v", id, err)
		}
	}
	for {
		nodes, got := u.Received()
		var c1 uint64
		for _, cs := range got {
			if cs.GetClusterName() != "c1" {
				t.Fatalf("the upstream received %v: a cluster the clients may not subscribe to", cs)
			}
			c1 += cs.GetUpstreamLocalityStats()[0].GetTotalSuccessfulRequests()
		}
		if c1 == 10 {
			if nodes[0].GetId() != "xds-relay-test" {
				t.Errorf("upstream saw node %v, want the relay's", nodes[0])
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("upstream received %d successful requests of c1, want 10", c1)
		case <-u.Got:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The load of an xdstp cluster goes to its authority's servers (gRFC A47).
func TestLoadReportsReachAuthorityServer(t *testing.T) {
	def := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	auth := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {XDSServers: []config.Server{{ServerURI: auth.Addr()}}}}
	}))
	st, ctx := openLRS(t, r.Addr())
	const name = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/c1"
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "a"}, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: name, UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalSuccessfulRequests: 7}}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, got := auth.Received(); len(got) > 0 {
			if got[0].GetClusterName() != name || got[0].GetUpstreamLocalityStats()[0].GetTotalSuccessfulRequests() != 7 {
				t.Fatalf("the authority's server received %v", got)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the authority's server received nothing")
		case <-auth.Got:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, got := def.Received(); len(got) > 0 {
		t.Errorf("the default server received %v", got)
	}
}

// Under keying.group_by a group's load goes on a stream presenting the
// group's node.
func TestLoadReportsOfNodeGroups(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := xdstest.StartRelay(t, u.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
	}))
	st, ctx := openLRS(t, r.Addr())
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "a", Cluster: "blue"}, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalSuccessfulRequests: 7}}}}}); err != nil {
		t.Fatal(err)
	}
	const node = "xds-relay-test/cluster=blue"
	for len(u.ReceivedFrom(node)) == 0 {
		select {
		case <-ctx.Done():
			nodes, _ := u.Received()
			t.Fatalf("nothing received on a stream of %s; nodes %v", node, nodes)
		case <-u.Got:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openLRS opens a load-reporting stream to the relay at addr, closed when
// the test ends; ctx is the stream's deadline.
func openLRS(t *testing.T, addr string) (lrsv3.LoadReportingService_StreamLoadStatsClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	t.Cleanup(cancel)
	st, err := lrsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, ctx
}
