package relay_test

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clustersvc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The per-type services are served by the same state machine: SotW
// StreamClusters (type_url may be left out) and Delta DeltaClusters.
func TestPerTypeServices(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr())

	s := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "cds"}, resource.ClusterType)
	s.Subscribe("")
	resp := s.MustRecv()
	if resp.GetTypeUrl() != resource.ClusterType {
		t.Fatalf("type %q", resp.GetTypeUrl())
	}
	wantNames(t, resp, "c1", "c2")

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	d, err := clustersvc.NewClusterDiscoveryServiceClient(conn).DeltaClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(&discoverygrpc.DeltaDiscoveryRequest{Node: &core.Node{Id: "delta-cds"},
		ResourceNamesSubscribe: []string{"c2"}}); err != nil {
		t.Fatal(err)
	}
	dresp, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	wantDelta(t, dresp, []string{"c2"}, nil)
}
