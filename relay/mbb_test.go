package relay_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Make before break when the upstream breaks first: go-control-plane's
// ordered ADS sends a snapshot's CDS (without the old cluster) before its RDS
// (moving the route to the new cluster). On an ADS stream the relay holds
// the removal of the old cluster while the client's route still names it,
// and sends it right after the route moved. Checked at every response, for
// SotW and Delta clients.
func TestMakeBeforeBreakUpstreamBreaksFirst(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.Ordered())
	state := func(n int) xdstest.Resources {
		c := fmt.Sprintf("c%d", n)
		return xdstest.Resources{
			resource.ClusterType: {xdstest.EDSCluster(c, "eds")},
			resource.RouteType:   {xdstest.GRPCRoute("r", c)},
		}
	}
	up.SetResources(state(0))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw" // go-control-plane orders SotW ADS only
	}))
	const rounds = 8
	sotw := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	sotw.Subscribe(resource.ClusterType, "*")
	sotw.Subscribe(resource.RouteType, "r")
	delta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	delta.Subscribe(resource.ClusterType, []string{"*"}, nil)
	delta.Subscribe(resource.RouteType, []string{"r"}, nil)

	sc, dc := newRouteClient(), newRouteClient()
	step := func(n int) {
		t.Helper()
		want := fmt.Sprintf("c%d", n)
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
		defer cancel()
		for !sc.at(want) {
			resp, err := sotw.Recv(ctx)
			if err != nil {
				t.Fatalf("sotw client waiting for %s: %v (holds %v)", want, err, sc)
			}
			sc.applySotW(t, resp)
			sotw.Ack(resp)
		}
		for !dc.at(want) {
			resp, ok := delta.TryRecv(time.Until(deadline(ctx)))
			if !ok {
				t.Fatalf("delta client waiting for %s (holds %v)", want, dc)
			}
			dc.applyDelta(t, resp)
			delta.Ack(resp)
		}
	}
	step(0)
	for n := 1; n <= rounds; n++ {
		up.SetResources(state(n)) // one snapshot: c(n-1) gone, the route moved to c(n)
		step(n)
	}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// routeClient is what a client holds of clusters and of route "r", checked
// after every response: the route never names a cluster the client lacks.
type routeClient struct {
	clusters map[string]bool
	routeTo  string
}

func newRouteClient() *routeClient { return &routeClient{clusters: map[string]bool{}} }

func (c *routeClient) String() string {
	return fmt.Sprintf("clusters %v route→%q", slices.Sorted(maps.Keys(c.clusters)), c.routeTo)
}

// at reports whether the client holds exactly cluster want and the route
// names it.
func (c *routeClient) at(want string) bool {
	return c.routeTo == want && len(c.clusters) == 1 && c.clusters[want]
}

func (c *routeClient) check(t *testing.T) {
	t.Helper()
	if c.routeTo != "" && !c.clusters[c.routeTo] {
		t.Fatalf("make before break broken: %v", c)
	}
}

func (c *routeClient) route(t *testing.T, b []byte) {
	rc := &route.RouteConfiguration{}
	if err := proto.Unmarshal(b, rc); err != nil {
		t.Fatal(err)
	}
	c.routeTo = rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
}

func (c *routeClient) applySotW(t *testing.T, r *discoverygrpc.DiscoveryResponse) {
	t.Helper()
	switch r.GetTypeUrl() {
	case resource.ClusterType:
		c.clusters = map[string]bool{}
		for _, n := range anyNames(r) {
			c.clusters[n] = true
		}
	case resource.RouteType:
		c.route(t, r.GetResources()[0].GetValue())
	}
	c.check(t)
}

func (c *routeClient) applyDelta(t *testing.T, r *discoverygrpc.DeltaDiscoveryResponse) {
	t.Helper()
	switch r.GetTypeUrl() {
	case resource.ClusterType:
		for _, res := range r.GetResources() {
			c.clusters[res.GetName()] = true
		}
		for _, n := range r.GetRemovedResources() {
			delete(c.clusters, n)
		}
	case resource.RouteType:
		for _, res := range r.GetResources() {
			c.route(t, res.GetResource().GetValue())
		}
	}
	c.check(t)
}

// A SotW client keeps a route the upstream deleted until it stops
// subscribing to it (nothing tells a SotW client that a RouteConfiguration
// is gone), so the cluster the route names stays until then, though an RDS
// response for another route went out after the deletion (the oracle: the
// relay took the route for gone once its last RDS response's View lacked it,
// and sent the CDS without the cluster while the client's listener and
// route still named it).
func TestMakeBeforeBreakSotWRouteDeletedUpstream(t *testing.T) {
	up := xdstest.StartUpstream(t)
	state := func(routes []types.Resource, clusters ...string) xdstest.Resources {
		res := xdstest.Resources{resource.RouteType: routes}
		for _, c := range clusters {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, "eds"))
		}
		return res
	}
	up.SetResources(state([]types.Resource{xdstest.GRPCRoute("r1", "c1"), xdstest.GRPCRoute("r2", "c2")}, "c1", "c2", "c3"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta" // the upstream says r1 is gone
	}))
	cl := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	cl.Subscribe(resource.ClusterType, "*")
	cl.Subscribe(resource.RouteType, "r1", "r2")
	drain := func(check func(*discoverygrpc.DiscoveryResponse)) {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), quiet)
			resp, err := cl.Recv(ctx)
			cancel()
			if err != nil {
				return
			}
			check(resp)
			cl.Ack(resp)
		}
	}
	clusters := func(resp *discoverygrpc.DiscoveryResponse) []string {
		names := anyNames(resp)
		slices.Sort(names)
		return names
	}
	drain(func(*discoverygrpc.DiscoveryResponse) {})
	// r1 goes and r2 moves to c3: the client is sent r2 and keeps r1, which
	// it still subscribes to (its listener has not changed yet).
	up.SetResources(state([]types.Resource{xdstest.GRPCRoute("r2", "c3")}, "c1", "c2", "c3"))
	sawRoute := false
	drain(func(resp *discoverygrpc.DiscoveryResponse) {
		sawRoute = sawRoute || resp.GetTypeUrl() == resource.RouteType
	})
	if !sawRoute {
		t.Fatal("r2's move never reached the client")
	}
	// c1 goes: r1, which the client holds, names it.
	up.SetResources(state([]types.Resource{xdstest.GRPCRoute("r2", "c3")}, "c2", "c3"))
	drain(func(resp *discoverygrpc.DiscoveryResponse) {
		if resp.GetTypeUrl() == resource.ClusterType && !slices.Contains(clusters(resp), "c1") {
			t.Fatalf("clusters %v while the client still holds r1, which names c1", clusters(resp))
		}
	})
	cl.Subscribe(resource.RouteType, "r2") // its listener no longer names r1
	resp := cl.RecvType(resource.ClusterType)
	if got := clusters(resp); !slices.Equal(got, []string{"c2", "c3"}) {
		t.Fatalf("after the client dropped r1: clusters %v, want [c2 c3]", got)
	}
}

// A cluster whose removal is held back because the client's route names it
// is removed once the route moves, also when holding it back changed
// nothing the client holds (the upstream removed it alone, the route moving
// to a cluster the client had already): the held removal was not recorded,
// and the client kept the deleted cluster for good.
func TestMakeBeforeBreakRemovalAloneIsReleased(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.Ordered())
	state := func(to string, clusters ...string) xdstest.Resources {
		res := xdstest.Resources{resource.RouteType: {xdstest.GRPCRoute("r", to)}}
		for _, c := range clusters {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, "eds"))
		}
		return res
	}
	up.SetResources(state("c1", "c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw" // go-control-plane orders SotW ADS only: CDS first
	}))
	cl := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	cl.Subscribe(resource.ClusterType, "*")
	cl.Subscribe(resource.RouteType, "r")
	rc := newRouteClient()
	step := func(to string, want ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
		defer cancel()
		for rc.routeTo != to || !slices.Equal(slices.Sorted(maps.Keys(rc.clusters)), want) {
			resp, err := cl.Recv(ctx)
			if err != nil {
				t.Fatalf("waiting for route→%s and clusters %v: %v (holds %v)", to, want, err, rc)
			}
			rc.applySotW(t, resp)
			cl.Ack(resp)
		}
	}
	step("c1", "c1", "c2")
	up.SetResources(state("c2", "c2")) // one snapshot: c1 goes, the route moves to c2
	step("c2", "c2")
}

// A SotW client from elsewhere holds a route to a cluster the upstream no
// longer has (the upstream's own state leaves the reference dangling, as a
// TP2 replacement does for a client that no new variant matches). The relay
// cannot send the cluster as the client may hold it, so make before break
// may hold the CDS response only while the client's reconnect is in
// progress: after that it goes out, and so do later updates.
func TestMakeBeforeBreakDanglingReferenceFromElsewhere(t *testing.T) {
	up := xdstest.StartUpstream(t)
	state := func(clusters ...string) xdstest.Resources {
		res := xdstest.Resources{resource.RouteType: {xdstest.GRPCRoute("r1", "c1")}}
		for _, c := range clusters {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, c))
		}
		return res
	}
	up.SetResources(state("c2")) // r1 names c1, which the upstream does not have
	r := xdstest.StartRelay(t, up.Addr())
	cl := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	cl.Resume(resource.ClusterType, "v-elsewhere")
	cl.Resume(resource.RouteType, "v-elsewhere", "r1")
	want := [][]string{{"c2"}, {"c2", "c3"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(want) > 0 {
		resp, err := cl.Recv(ctx)
		if err != nil {
			t.Fatalf("the client never got clusters %v: %v", want[0], err)
		}
		cl.Ack(resp)
		if resp.GetTypeUrl() != resource.ClusterType {
			continue
		}
		got := anyNames(resp)
		slices.Sort(got)
		if !slices.Equal(got, want[0]) {
			t.Fatalf("clusters %v, want %v", got, want[0])
		}
		if want = want[1:]; len(want) == 1 {
			up.SetResources(state("c2", "c3"))
		}
	}
}

// A SotW client from elsewhere rejects every CDS response that carries c1
// (a picky Envoy and a bad version), so it never holds c1 here; the
// upstream then deletes c1 while its own route r1 still names it. Make
// before break keeps only what the client holds: the rejected copy of c1 is
// not one. Taken from the response last sent, it kept the CDS answer the
// version the client had rejected, so nothing was sent; kept in a later
// response, it had the client reject every CDS response after it.
func TestMakeBeforeBreakKeepsNoRejectedCopy(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later_update=%v", later), func(t *testing.T) {
			testKeepsNoRejectedCopy(t, later)
		})
	}
}

func testKeepsNoRejectedCopy(t *testing.T, later bool) {
	up := xdstest.StartUpstream(t)
	state := func(clusters ...string) xdstest.Resources {
		res := xdstest.Resources{resource.RouteType: {xdstest.GRPCRoute("r1", "c1")}}
		for _, c := range clusters {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, c))
		}
		return res
	}
	up.SetResources(state("c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr())
	cl := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "picky"})
	cl.Resume(resource.ClusterType, "v-elsewhere")
	cl.Resume(resource.RouteType, "v-elsewhere", "r1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	removed := false
	for {
		resp, err := cl.Recv(ctx)
		if err != nil {
			t.Fatalf("the client never got a CDS response without the c1 it rejects (removed upstream: %v): %v", removed, err)
		}
		got := anyNames(resp)
		if resp.GetTypeUrl() != resource.ClusterType || !slices.Contains(got, "c1") {
			cl.Ack(resp)
			if resp.GetTypeUrl() == resource.ClusterType {
				return
			}
			continue
		}
		cl.Nack(resp, "bad version")
		if !removed {
			removed = true
			up.SetResources(state("c2")) // r1 dangles: the upstream's own state
			if later {
				up.SetResources(state("c2", "c3"))
			}
		}
	}
}
