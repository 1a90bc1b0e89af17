package relay_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// edsOf returns the EDS service name of cluster c1 in a CDS response ("" if
// absent): the tests change it to tell versions apart.
func edsOf(t *testing.T, resp *discoverygrpc.DiscoveryResponse) string {
	t.Helper()
	for _, a := range resp.GetResources() {
		c := &cluster.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if c.GetName() == "c1" {
			return c.GetEdsClusterConfig().GetServiceName()
		}
	}
	return ""
}

func c1(eds string) xdstest.Resources {
	return xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", eds), xdstest.EDSCluster("c2", "eds-c2")}}
}

// rolloutFleet starts n wildcard CDS clients, all holding c1@eds-1.
func rolloutFleet(t *testing.T, hold time.Duration, n int) (*xdstest.Upstream, *xdstest.Relay, []*xdstest.ADSClient) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Rollout = &config.Rollout{CanaryFraction: 0.2, Hold: hold, MaxNACKRatio: 0}
	}))
	clients := make([]*xdstest.ADSClient, n)
	for i := range clients {
		clients[i] = xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("node-%02d", i)})
		clients[i].Subscribe(resource.ClusterType, "*")
		resp := clients[i].RecvType(resource.ClusterType)
		if got := edsOf(t, resp); got != "eds-1" {
			t.Fatalf("initial c1 %q", got)
		}
		clients[i].Ack(resp)
	}
	return up, r, clients
}

// canaries returns the clients that got a response within the quiet time,
// with their responses.
func canaries(t *testing.T, clients []*xdstest.ADSClient) (map[int]*discoverygrpc.DiscoveryResponse, []int) {
	t.Helper()
	got := map[int]*discoverygrpc.DiscoveryResponse{}
	var rest []int
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		resp, err := c.Recv(ctx)
		cancel()
		if err == nil {
			got[i] = resp
		} else {
			rest = append(rest, i)
		}
	}
	return got, rest
}

// A version the canaries NACK never reaches beyond them; new subscribers get
// the last good version; the next good version reaches everyone.
func TestRolloutHaltsOnCanaryNACK(t *testing.T) {
	up, r, clients := rolloutFleet(t, 30*time.Second, 10)

	up.SetResources(c1("eds-bad"))
	got, rest := canaries(t, clients)
	if len(got) != 2 {
		t.Fatalf("%d canaries got the change, want 2 (20%% of 10)", len(got))
	}
	// One canary NACKs (the rollout halts), the other had accepted it.
	can := slices.Sorted(maps.Keys(got))
	nacker, acker := can[0], can[1]
	for i, resp := range got {
		if edsOf(t, resp) != "eds-bad" {
			t.Fatalf("canary %d got %q", i, edsOf(t, resp))
		}
	}
	clients[nacker].Nack(got[nacker], "bad eds config")
	clients[acker].Ack(got[acker])
	for _, i := range rest {
		clients[i].ExpectNoResponse(quiet / 3) // halted: nothing for the others
	}
	// The canary that accepted it is put back on the last good version; the
	// one that NACKed still runs it and gets nothing.
	resp := clients[acker].RecvType(resource.ClusterType)
	if edsOf(t, resp) != "eds-1" {
		t.Fatalf("canary %d after the halt holds %q", acker, edsOf(t, resp))
	}
	clients[acker].Ack(resp)
	clients[nacker].ExpectNoResponse(quiet / 3)
	info := r.DebugRollouts()
	if len(info) != 1 || info[0].State != "halted" || info[0].NACKs < 1 || info[0].Reasons[0] != "bad eds config" {
		t.Fatalf("/debug/rollouts = %+v", info)
	}

	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
	late.Subscribe(resource.ClusterType, "*")
	if got := edsOf(t, late.RecvType(resource.ClusterType)); got != "eds-1" {
		t.Fatalf("a new subscriber during the halt got %q, want the last good eds-1", got)
	}

	// The next upstream version is a new rollout; the canaries ACK it and
	// everyone gets it.
	up.SetResources(c1("eds-2"))
	got, rest = canaries(t, append(clients, late))
	for i, resp := range got {
		if edsOf(t, resp) == "eds-2" {
			append(clients, late)[i].Ack(resp)
		}
	}
	for _, i := range rest {
		c := append(clients, late)[i]
		resp := c.RecvType(resource.ClusterType)
		if edsOf(t, resp) != "eds-2" {
			t.Fatalf("client %d got %q after the release", i, edsOf(t, resp))
		}
		c.Ack(resp)
	}
}

// With every canary ACKing, the change reaches everyone at once; with silent
// canaries, when the hold passes.
func TestRolloutReleases(t *testing.T) {
	t.Run("canaries ACK", func(t *testing.T) {
		up, r, clients := rolloutFleet(t, 30*time.Second, 5)
		up.SetResources(c1("eds-2"))
		got, rest := canaries(t, clients)
		if len(got) != 1 {
			t.Fatalf("%d canaries, want 1 (at least one)", len(got))
		}
		for i, resp := range got {
			clients[i].Ack(resp)
		}
		for _, i := range rest {
			if g := edsOf(t, clients[i].RecvType(resource.ClusterType)); g != "eds-2" {
				t.Fatalf("got %q", g)
			}
		}
		if info := r.DebugRollouts(); len(info) != 1 || !info[0].Judged {
			t.Errorf("/debug/rollouts = %+v, want judged (the canary ACKed)", info)
		}
	})
	t.Run("hold passes", func(t *testing.T) {
		up, r, clients := rolloutFleet(t, 500*time.Millisecond, 5)
		up.SetResources(c1("eds-2"))
		for _, c := range clients { // canaries stay silent; the hold releases it
			if g := edsOf(t, c.RecvType(resource.ClusterType)); g != "eds-2" {
				t.Fatalf("got %q", g)
			}
		}
		if info := r.DebugRollouts(); len(info) != 1 || info[0].State != "released" || info[0].Judged {
			t.Fatalf("/debug/rollouts = %+v, want released and not judged (no canary answered)", info)
		}
		unjudged := map[string]string{"type_url": resource.ClusterType, "result": "unjudged"}
		if got := metricValue(t, r.Relay, "xds_relay_rollouts_total", unjudged); got != 1 {
			t.Errorf("rollouts_total{result=unjudged} = %v, want 1: a release with no verdict is no approval", got)
		}
	})
}

// Delta clients get the same guarded rollout; the halt is counted.
func TestRolloutDeltaHalt(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Rollout = &config.Rollout{CanaryFraction: 0.25, Hold: 30 * time.Second}
	}))
	clients := make([]*xdstest.DeltaClient, 4)
	for i := range clients {
		clients[i] = xdstest.DialDelta(t, r.Addr(), &core.Node{Id: fmt.Sprintf("d-%d", i)})
		clients[i].Subscribe(resource.ClusterType, []string{"*"}, nil)
		clients[i].Ack(clients[i].MustRecv())
	}
	up.SetResources(c1("eds-bad"))
	var canary *xdstest.DeltaClient
	var rest []*xdstest.DeltaClient
	for _, c := range clients {
		if resp, ok := c.TryRecv(quiet); ok {
			canary = c
			c.Nack(resp, "no")
		} else {
			rest = append(rest, c)
		}
	}
	if canary == nil || len(rest) != 3 {
		t.Fatalf("canary %v, %d others: want one canary of four", canary != nil, len(rest))
	}
	for _, c := range rest {
		c.ExpectNoResponse(quiet / 3)
	}
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	halted := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "xds_relay_rollouts_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "halted" {
						halted += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if halted != 1 {
		t.Fatalf("xds_relay_rollouts_total{result=halted} = %v, want 1", halted)
	}
}

// A halt holds back only the rolled-out change: a removal that came in the
// same upstream response still reaches the others (the halted barrier item
// was dropped whole, and a Delta client kept the removed cluster for good).
func TestRolloutDeltaHaltKeepsRemoval(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Rollout = &config.Rollout{CanaryFraction: 0.25, Hold: 30 * time.Second}
	}))
	clients := make([]*xdstest.DeltaClient, 4)
	for i := range clients {
		clients[i] = xdstest.DialDelta(t, r.Addr(), &core.Node{Id: fmt.Sprintf("d-%d", i)})
		clients[i].Subscribe(resource.ClusterType, []string{"*"}, nil)
		clients[i].Ack(clients[i].MustRecv())
	}
	// c1 changes to a bad version and c2 goes, in one response.
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "eds-bad")}})
	var canary *xdstest.DeltaClient
	var rest []*xdstest.DeltaClient
	for _, c := range clients {
		if resp, ok := c.TryRecv(quiet); ok {
			canary = c
			c.Nack(resp, "no")
		} else {
			rest = append(rest, c)
		}
	}
	if canary == nil || len(rest) != 3 {
		t.Fatalf("canary %v, %d others: want one canary of four", canary != nil, len(rest))
	}
	for _, c := range rest {
		resp, ok := c.TryRecv(quiet)
		if !ok {
			t.Fatal("after the halt a client was not told that c2 is gone")
		}
		wantDelta(t, resp, nil, []string{"c2"})
		c.Ack(resp)
	}
}

// A Delta canary's NACK is about the resources of the responses it judges:
// a change that joined the rollout in a response the canary had accepted
// before is released, not halted with the one it NACKed (the oracle: a good
// version was halted with a bad one that joined its rollout, and the relay
// served the older version of it for good — a bad one, which picky clients
// rejected until the end).
func TestRolloutDeltaHaltBlamesWhatTheNACKCarried(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Rollout = &config.Rollout{CanaryFraction: 0.5, Hold: 30 * time.Second}
	}))
	clients := make([]*xdstest.DeltaClient, 4)
	for i := range clients {
		clients[i] = xdstest.DialDelta(t, r.Addr(), &core.Node{Id: fmt.Sprintf("d-%d", i)})
		clients[i].Subscribe(resource.ClusterType, []string{"*"}, nil)
		clients[i].Ack(clients[i].MustRecv())
	}
	edsIn := func(resp *discoverygrpc.DeltaDiscoveryResponse) map[string]string {
		out := map[string]string{}
		for _, res := range resp.GetResources() {
			c := &cluster.Cluster{}
			if err := res.GetResource().UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			out[c.GetName()] = c.GetEdsClusterConfig().GetServiceName()
		}
		return out
	}
	// c1 gets a good version: the first canary accepts it, the second says
	// nothing yet, so the rollout stays pending.
	up.SetResources(c1("eds-2"))
	var can, rest []*xdstest.DeltaClient
	for _, c := range clients {
		if resp, ok := c.TryRecv(quiet); ok {
			if len(can) == 0 {
				c.Ack(resp)
			}
			can = append(can, c)
		} else {
			rest = append(rest, c)
		}
	}
	if len(can) != 2 {
		t.Fatalf("%d canaries, want 2 of 4", len(can))
	}
	// c2 gets a bad version: it joins the rollout, and the first canary
	// NACKs the response that carries it (and only it).
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "eds-2"), xdstest.EDSCluster("c2", "eds-bad")}})
	resp, ok := can[0].TryRecv(quiet)
	if !ok {
		t.Fatal("the canary did not get c2's new version")
	}
	if got := edsIn(resp); len(got) != 1 || got["c2"] != "eds-bad" {
		t.Fatalf("the canary got %v, want c2 only", got)
	}
	can[0].Nack(resp, "bad c2")
	for _, c := range rest {
		resp, ok := c.TryRecv(quiet)
		if !ok {
			t.Fatal("after the halt a client never got c1's good version, which no NACK was about")
		}
		if got := edsIn(resp); got["c1"] != "eds-2" || got["c2"] == "eds-bad" {
			t.Fatalf("after the halt a client got %v, want c1 at eds-2 and not c2's halted version", got)
		}
		c.Ack(resp)
	}
}

// A non-canary that changes its subscription while a rollout holds it back
// does not regress: after the release its last response carries the new
// version.
func TestRolloutSubscriptionChangeBehindBarrier(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Rollout = &config.Rollout{CanaryFraction: 0.2, Hold: 30 * time.Second}
	}))
	// c2 is cached (another client watches it), so the subscription change
	// below is answered from the cache, not by a later upstream update.
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "c2")
	other.Ack(other.RecvType(resource.ClusterType))
	clients := make([]*xdstest.ADSClient, 5)
	for i := range clients {
		clients[i] = xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("n%d", i)})
		clients[i].Subscribe(resource.ClusterType, "c1")
		clients[i].Ack(clients[i].RecvType(resource.ClusterType))
	}
	up.SetResources(c1("eds-2"))
	got, rest := canaries(t, clients)
	if len(got) != 1 || len(rest) != 4 {
		t.Fatalf("%d canaries", len(got))
	}
	held := clients[rest[0]]
	held.Subscribe(resource.ClusterType, "c1", "c2") // behind its barrier
	held.ExpectNoResponse(quiet / 3)
	for i, resp := range got {
		clients[i].Ack(resp)
	}
	var last *discoverygrpc.DiscoveryResponse
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		resp, err := held.Recv(ctx)
		cancel()
		if err != nil {
			break
		}
		last = resp
		held.Ack(resp)
	}
	if last == nil || edsOf(t, last) != "eds-2" {
		t.Fatalf("after the release the client holds c1 %q, want eds-2", edsOf(t, last))
	}
	wantNames(t, last, "c1", "c2")
}
