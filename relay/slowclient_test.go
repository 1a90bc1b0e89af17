package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A client that stops reading does not delay the others, and when it reads
// again it gets the latest state, coalesced rather than every step.
func TestSlowClientCoalescesAndDelaysNobody(t *testing.T) {
	up := xdstest.StartUpstream(t)
	gen := func(g int) xdstest.Resources {
		var cs []types.Resource
		for i := range 200 { // ~40 KB per CDS response
			cs = append(cs, xdstest.EDSCluster(fmt.Sprintf("c%03d", i), strings.Repeat("x", 150)))
		}
		cs = append(cs, xdstest.EDSCluster("gen", fmt.Sprintf("gen-%d", g)))
		return xdstest.Resources{resource.ClusterType: cs}
	}
	up.SetResources(gen(0))
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr())

	// The stuck client: small flow-control windows, and it does not read.
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stuck, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: "stuck"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}

	fast := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "fast"})
	fast.Subscribe(resource.ClusterType)
	fast.Ack(fast.RecvType(resource.ClusterType))
	const steps = 30
	for g := 1; g <= steps; g++ {
		up.SetResources(gen(g))
		fast.Ack(fast.RecvType(resource.ClusterType))
	}

	// Now the stuck client reads: far fewer responses than changes, the last
	// one being the latest state.
	got := 0
	var last *discoverygrpc.DiscoveryResponse
	for {
		resp, err := stuck.Recv()
		if err != nil {
			t.Fatalf("stuck client: %v", err)
		}
		got++
		last = resp
		if err := stuck.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(clusterEDSNames(t, last), fmt.Sprintf("gen-%d", steps)) {
			break
		}
	}
	if got > steps/2 {
		t.Errorf("stuck client got %d responses for %d changes: not coalesced", got, steps)
	}
}

func clusterEDSNames(t *testing.T, resp *discoverygrpc.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		c := &cluster.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.GetEdsClusterConfig().GetServiceName())
	}
	return out
}
