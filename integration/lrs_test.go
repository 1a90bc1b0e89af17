package integration_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// grpc-go's xDS client, with a Cluster whose lrs_server is self (gRFC A27),
// reports its load to the relay, which sends the sum of its clients'
// reports to the control plane: the control plane counts as many
// successful requests as the backend served.
func TestGRPCGoLoadReports(t *testing.T) {
	t.Parallel()
	const target = "lrs-svc"
	lrs := &xdstest.LRSUpstream{}
	up := xdstest.StartUpstream(t, xdstest.WithLRS(lrs))
	a := xdstest.StartBackend(t, "A")
	res := xdstest.GRPCResources(target, a.Addr())
	names := xdstest.NamesFor(target)
	c := xdstest.EDSCluster(names.Cluster, names.Endpoints)
	c.LrsServer = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Self{Self: &corev3.SelfConfigSource{}}}
	res[resource.ClusterType] = []types.Resource{c}
	up.SetResources(res)
	xdsAddr := startRelay(t, up.Addr())

	var conns []*grpc.ClientConn
	for _, id := range []string{"lrs-client-1", "lrs-client-2"} {
		conns = append(conns, dialXDS(t, xdstest.Bootstrap{ServerURI: xdsAddr, NodeID: id, NodeCluster: "integration"}.JSON(), target))
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	for i, conn := range conns {
		for range 10 * (i + 1) {
			if err := conn.Invoke(ctx, xdstest.EchoMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("call: %v", err)
			}
		}
	}
	want := uint64(a.Calls())
	for {
		nodes, stats := lrs.Received()
		var got uint64
		for _, cs := range stats {
			if cs.GetClusterName() != names.Cluster || cs.GetClusterServiceName() != names.Endpoints {
				t.Fatalf("the control plane received stats of %q/%q, want %q/%q", cs.GetClusterName(),
					cs.GetClusterServiceName(), names.Cluster, names.Endpoints)
			}
			for _, ls := range cs.GetUpstreamLocalityStats() {
				got += ls.GetTotalSuccessfulRequests()
			}
		}
		if got == want {
			if nodes[0].GetId() != xdstest.RelayConfig("", "").Node.ID {
				t.Errorf("the control plane saw node %v, want the relay's", nodes[0])
			}
			break
		}
		if got > want {
			t.Fatalf("the control plane counted %d successful requests, the backend served %d", got, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the control plane counted %d successful requests, the backend served %d", got, want)
		case <-lrs.Got:
		case <-time.After(50 * time.Millisecond):
		}
	}
}
