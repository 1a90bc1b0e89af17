package relay_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A halted rollout of another authority's name that the default servers
// list brings back the accepted content, and the name stays in the
// wildcard set: the listing is the default servers' word on the set, not
// part of what was rolled out. The accepted copy came from its authority
// before the default servers listed the name, and came back unlisted: the
// wildcard client that NACKed the new version was told the name was gone,
// and a new wildcard client was served the set without it, while both
// servers had it.
func TestHaltedRolloutKeepsTheListing(t *testing.T) {
	x := globAuth + "x"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0"))
	auth := xdstest.StartUpstream(t)
	auth.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster(x, "eds-x-v1")}})
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
		c.Rollout = &config.Rollout{CanaryFraction: 1, Hold: 30 * time.Second, MaxNACKRatio: 0}
	}))
	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"}) // subscribes x on its authority's stream
	named.Subscribe(resource.ClusterType, []string{x}, nil)
	resp := named.MustRecv()
	wantDelta(t, resp, []string{x}, nil)
	named.Ack(resp)
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp = wild.MustRecv()
	wantDelta(t, resp, []string{"c0"}, nil) // the default servers do not list x yet
	wild.Ack(resp)

	// x changes at its authority (a rollout starts, both clients are
	// canaries), then the default servers list it: the wildcard client
	// gets it, rejects it, and the rollout halts.
	auth.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster(x, "eds-x-v2")}})
	resp = named.MustRecv()
	wantDelta(t, resp, []string{x}, nil)
	named.Ack(resp)
	def.SetResources(clusters("c0", x))
	resp = wild.MustRecv()
	wantDelta(t, resp, []string{x}, nil)
	wild.Nack(resp, "bad cluster")
	for {
		resp, ok := wild.TryRecv(quiet)
		if !ok {
			break
		}
		if slices.Contains(resp.GetRemovedResources(), x) {
			t.Fatalf("the wildcard client was told %s is gone after its rollout halted, while both servers have it", x)
		}
		wild.Ack(resp)
	}

	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
	late.Subscribe(resource.ClusterType, "*")
	want := map[string]string{"c0": "eds-c0", x: "eds-x-v1"} // the accepted version, listed
	if got := edsNames(t, late.RecvType(resource.ClusterType)); !maps.Equal(got, want) {
		t.Fatalf("a new wildcard client during the halt got %v, want %v", got, want)
	}
}
