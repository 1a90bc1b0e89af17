package xdstest_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A Linear Upstream sets and deletes resources one at a time, and a test
// reads its requests in order with one cursor.
func TestLinearUpstream(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.Linear())
	up.UpdateResources(resource.ClusterType, xdstest.EDSCluster("a", "a"), xdstest.EDSCluster("b", "b"))
	c := xdstest.DialDelta(t, up.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := xdstest.DeltaHolds{}
	resp := c.MustRecv()
	held.Apply(resp)
	c.Ack(resp)
	if got := slices.Sorted(maps.Keys(held)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("the client holds %v, want a and b", held)
	}
	cur := 0
	if req := up.NextDelta(t, &cur, resource.ClusterType); !slices.Equal(req.GetResourceNamesSubscribe(), []string{"*"}) {
		t.Errorf("first request %v, want the wildcard", req)
	}
	if ack := up.NextDelta(t, &cur, resource.ClusterType); ack.GetResponseNonce() != resp.GetNonce() {
		t.Errorf("second request %v, want the ACK of %q", ack, resp.GetNonce())
	}

	up.DeleteResources(resource.ClusterType, "a")
	resp = c.MustRecv()
	if bad := held.Apply(resp); len(bad) != 0 || held.Has("a") || !held.Has("b") {
		t.Fatalf("after deleting a the client holds %v (sent and removed %v), want b", held, bad)
	}
	if up.LinearCache(resource.ClusterType).NumResources() != 1 {
		t.Errorf("the cache has %d resources, want 1", up.LinearCache(resource.ClusterType).NumResources())
	}
}

// A SotWOnly Upstream answers Delta streams with Unimplemented; one
// WithADS serves the test's own ADS and records its requests.
func TestSotWOnlyAndWithADS(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.Linear(), xdstest.SotWOnly())
	conn, err := grpc.NewClient(up.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(context.Background())
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Delta stream to a SotWOnly upstream: %v, want Unimplemented", err)
	}

	own := xdstest.StartUpstream(t, xdstest.WithADS(silentADS{}))
	c := xdstest.DialADS(t, own.Addr(), node("n1", "c1"))
	c.Subscribe(resource.ClusterType, "a")
	cur := 0
	if req := own.NextSotW(t, &cur, resource.ClusterType); !slices.Equal(req.GetResourceNames(), []string{"a"}) {
		t.Errorf("recorded %v, want the request for a", req)
	}
}

// silentADS reads SotW requests and answers none.
type silentADS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
}

func (silentADS) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
	}
}
