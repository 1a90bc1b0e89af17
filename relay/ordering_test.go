package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Make before break: the upstream adds a cluster and points the route at it,
// then removes the old cluster, again and again. Clients — some of them slow
// readers — must never hold a route naming a cluster they do not hold. (The
// test client buffers what it receives, so relay queues rarely coalesce
// here: that is proven by the property test of downstream/queue_test.go;
// the rollout variant holds changes back in the queues for real.)
func TestMakeBeforeBreakOrdering(t *testing.T) {
	t.Run("plain", func(t *testing.T) { makeBeforeBreak(t, nil) })
	// A guarded rollout holds each route change back from the non-canaries:
	// the cluster removal behind it must wait too.
	t.Run("rollout", func(t *testing.T) {
		makeBeforeBreak(t, &config.Rollout{CanaryFraction: 0.25, Hold: 200 * time.Millisecond})
	})
}

func makeBeforeBreak(t *testing.T, ro *config.Rollout) {
	up := xdstest.StartUpstream(t)
	// state(route, clusters...) is one upstream snapshot.
	state := func(routeTo string, cs ...string) xdstest.Resources {
		res := xdstest.Resources{resource.RouteType: {xdstest.GRPCRoute("r", routeTo)}}
		for _, c := range cs {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, "eds"))
		}
		return res
	}
	only := func(n int) xdstest.Resources { return state(fmt.Sprintf("c%d", n), fmt.Sprintf("c%d", n)) }
	up.SetResources(only(0))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw" // go-control-plane orders SotW ADS only
		c.Rollout = ro
	}))

	const clients, rounds = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	final := fmt.Sprintf("c%d", rounds)
	synced := make(chan struct{}, clients)
	for i := range clients {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("n%d", i)})
		c.Subscribe(resource.ClusterType, "*")
		c.Subscribe(resource.RouteType, "r")
		slow := i%2 == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- followOrdered(ctx, c, slow, final, synced)
		}()
	}
	for range clients {
		select {
		case <-synced: // initial state held: the churn starts from there
		case <-ctx.Done():
			t.Fatal("clients did not get their initial state")
		}
	}
	// Each upstream snapshot changes one type, so go-control-plane cannot
	// reorder them (SotW sends a type's latest state when its watch reopens);
	// the relay must keep that order for every client, slow readers included.
	acked := func(version, typ string) {
		up.WaitRequest(t, 0, typ+" ACK of "+version, func(r xdstest.Request) bool {
			return r.TypeURL() == typ && r.SotW.GetVersionInfo() == version && !r.IsNACK()
		})
	}
	for n := 1; n <= rounds; n++ {
		prev, cur := fmt.Sprintf("c%d", n-1), fmt.Sprintf("c%d", n)
		acked(up.SetResources(state(prev, prev, cur)), resource.ClusterType) // make: add the new cluster
		acked(up.SetResources(state(cur, prev, cur)), resource.RouteType)    // move the route
		acked(up.SetResources(state(cur, cur)), resource.ClusterType)        // break: drop the old cluster
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if ro != nil && len(r.DebugRollouts()) == 0 {
		t.Error("no rollout ran")
	}
	if t.Failed() {
		for _, r := range up.Responses() {
			t.Logf("upstream sent %s %s %v", r.TypeURL(), r.SotW.GetVersionInfo(), anyNames(r.SotW))
		}
	}
}

// followOrdered applies responses as a client would and checks after each one
// that the route names only held clusters, until the route names final and
// the clusters are exactly final.
func followOrdered(ctx context.Context, c *xdstest.ADSClient, slow bool, final string, synced chan<- struct{}) error {
	var held []string
	routeTo := ""
	for {
		if synced != nil && routeTo != "" && len(held) > 0 {
			synced <- struct{}{}
			synced = nil
		}
		if slow && synced == nil {
			time.Sleep(30 * time.Millisecond) // a slow reader (not a synchronisation)
		}
		resp, err := c.Recv(ctx)
		if err != nil {
			return fmt.Errorf("held %v route→%q: %w", held, routeTo, err)
		}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			held = anyNames(resp)
		case resource.RouteType:
			rc := &route.RouteConfiguration{}
			if err := proto.Unmarshal(resp.GetResources()[0].GetValue(), rc); err != nil {
				return err
			}
			routeTo = rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
		}
		c.Ack(resp)
		if routeTo != "" && len(held) > 0 && !slices.Contains(held, routeTo) {
			return fmt.Errorf("route names %q but the client holds clusters %v", routeTo, held)
		}
		if routeTo == final && slices.Equal(held, []string{final}) {
			return nil
		}
	}
}

func anyNames(resp *discoverygrpc.DiscoveryResponse) []string {
	var out []string
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			continue
		}
		if n, ok := m.(interface{ GetName() string }); ok {
			out = append(out, n.GetName())
		}
	}
	slices.Sort(out)
	return out
}
