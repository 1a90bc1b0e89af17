package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A glob member the cache holds from the default servers' listing, whose
// wildcard subscription has ended, is its own authority's to confirm: the
// authority's new stream is told it holds it and answers. A new stream of
// the default servers, which no longer list anything for the relay, does
// not make it unsure again: they never speak of it, so it stayed unsure for
// good, and a SotW client that brought the glob from elsewhere was never
// answered.
func TestLapsedListingIsNotTheDefaultServersToConfirm(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	g := xdstest.NewGlobADS(m1)
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	auth.Stop()
	r := startDeltaFederation(t, def, auth)

	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-" + m1}) // the default servers' listing
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, "c0", globG)
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard was never unsubscribed upstream", nil)

	// The authority's new stream declares m1 and answers with m2 only.
	g.Set(m1, m2)
	auth.Restart()
	recvClustersUntil(t, glob, map[string]string{"c0": "eds-c0", m1: "eds-" + m1, m2: "eds-" + m2})

	// The default servers' new stream answers c0, changed meanwhile.
	def.Stop()
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2"), xdstest.EDSCluster(m1, "eds-"+m1)}})
	def.Restart()
	recvClustersUntil(t, glob, map[string]string{"c0": "eds-c0-v2", m1: "eds-" + m1, m2: "eds-" + m2})

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-elsewhere", globG)
	ackUntil(t, moved, []string{m1, m2}, "the client that brought the glob from elsewhere was never answered")
}
