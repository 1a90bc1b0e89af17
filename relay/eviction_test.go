package relay_test

import (
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// upstreamHas waits until the relay's upstream subscription of typeURL is
// (or is no longer) the wildcard plus names.
func waitUpstream(t *testing.T, r *xdstest.Relay, typeURL string, wildcard bool, names ...string) {
	t.Helper()
	slices.Sort(names)
	xdstest.Eventually(t, func() bool {
		for _, u := range r.DebugUpstreams() {
			for _, ts := range u.Types {
				if ts.TypeURL == typeURL {
					return ts.Wildcard == wildcard && slices.Equal(ts.Names, names)
				}
			}
		}
		return !wildcard && len(names) == 0
	}, "upstream subscription of "+typeURL, func() any { return r.DebugUpstreams() })
}

// Nothing a client watches is ever evicted (issue: golang-lru's Remove runs
// the eviction callback, so a resource taken out of the LRU when a client
// watched it again was evicted by the next unrelated release). The sequence
// is the one that emptied a fleet's Listener set: clients leave, the linger
// passes, new clients come, an unrelated name is subscribed and released.
func TestWatchedNeverEvicted(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, _ bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode, xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.Linger = 20 * time.Millisecond
			c.Cache.MaxUnreferenced = 10000
		}))

		first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
		first.Subscribe(resource.ClusterType, "*")
		wantNames(t, first.RecvType(resource.ClusterType), "c1", "c2")
		first.Close()
		waitUpstream(t, r, resource.ClusterType, false) // the linger passed: unreferenced, in the LRU

		second := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "second"})
		second.Subscribe(resource.ClusterType, "*")
		resp := second.RecvType(resource.ClusterType)
		wantNames(t, resp, "c1", "c2")
		second.Ack(resp)
		waitUpstream(t, r, resource.ClusterType, true)

		// An unrelated name is subscribed and released: its linger ends with
		// an LRU pass that must not touch what "second" watches.
		other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
		other.Subscribe(resource.RouteType, "missing")
		waitUpstream(t, r, resource.RouteType, false, "missing")
		other.Close()
		waitUpstream(t, r, resource.RouteType, false)

		if got := cachedNames(r, resource.ClusterType); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Fatalf("cache holds clusters %v while a client watches c1 and c2", got)
		}
		// Every response "second" gets still carries what it watches.
		up.SetResources(clusters("c1", "c2", "c3"))
		wantNames(t, second.RecvType(resource.ClusterType), "c1", "c2", "c3")
		late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
		late.Subscribe(resource.ClusterType, "*")
		wantNames(t, late.RecvType(resource.ClusterType), "c1", "c2", "c3")
	})
}

// cachedNames lists the cached names of typeURL in the shared scope.
func cachedNames(r *xdstest.Relay, typeURL string) []string {
	var out []string
	for _, e := range r.DebugCache(relay.CacheFilter{Type: typeURL}) {
		if e.Scope == "" {
			out = append(out, e.Name)
		}
	}
	slices.Sort(out)
	return out
}
