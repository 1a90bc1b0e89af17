package relay_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// cacheGauges returns xds_relay_cache_resources and xds_relay_cache_bytes of
// clusters, and what /debug/cache lists of them (every scope).
func cacheGauges(t *testing.T, r *xdstest.Relay) (resources, bytes, listed, listedBytes float64) {
	t.Helper()
	labels := map[string]string{"type_url": resource.ClusterType}
	resources = max(0, metricValue(t, r.Relay, "xds_relay_cache_resources", labels))
	bytes = max(0, metricValue(t, r.Relay, "xds_relay_cache_bytes", labels))
	for _, e := range r.DebugCache(relay.CacheFilter{Type: resource.ClusterType}) {
		listed++
		listedBytes += float64(e.Bytes)
	}
	return
}

// wantGaugesMatchCache fails unless the cache gauges say what the cache
// holds.
func wantGaugesMatchCache(t *testing.T, r *xdstest.Relay, when string) {
	t.Helper()
	xdstest.Eventually(t, func() bool {
		n, b, ln, lb := cacheGauges(t, r)
		return n == ln && b == lb
	}, "the cache gauges match the cache "+when, func() any {
		n, b, ln, lb := cacheGauges(t, r)
		return []float64{n, b, ln, lb}
	})
}

// The cache gauges are what the cache holds: a node group's scope released
// with its resources is no longer counted (the gauges only grew).
func TestCacheGaugesGroupScopeReleased(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	up.SetSnapshot("blue", clusters("c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
		c.Upstream.Linger = 50 * time.Millisecond
	}))
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b1", Cluster: "blue"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1", "c2")
	wantGaugesMatchCache(t, r, "with the group's clusters")
	if n, _, _, _ := cacheGauges(t, r); n != 2 {
		t.Fatalf("xds_relay_cache_resources = %v, want 2", n)
	}
	c.Close()
	xdstest.Eventually(t, func() bool { n, _, _, _ := cacheGauges(t, r); return n == 0 },
		"the released group's clusters no longer counted", func() any { n, _, _, _ := cacheGauges(t, r); return n })
	wantGaugesMatchCache(t, r, "after the group's release")
}

// A cached resource that turns do_not_cache leaves the shared cache, and its
// bytes leave the gauge (they stayed counted).
func TestCacheGaugesDoNotCache(t *testing.T) {
	var mu sync.Mutex
	noCache := false
	f := &fakeCDS{answerNode: func(_ *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range []string{"shared", "turns"} {
			if len(names) > 0 && !slices.Contains(names, n) && !slices.Contains(names, "*") {
				continue
			}
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return nil, err
			}
			if n == "turns" && noCache {
				if a, err = anypb.New(&discoverygrpc.Resource{Name: n, Resource: a,
					CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}}); err != nil {
					return nil, err
				}
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}}
	addr := startFakeCDS(t, f)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, "shared", "turns")
	recvClusters(t, a, map[string]string{"shared": "eds-shared", "turns": "eds-turns"})
	wantGaugesMatchCache(t, r, "with both cached")

	mu.Lock()
	noCache = true
	mu.Unlock()
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "other") // the shared scope asks again: turns is do_not_cache now
	xdstest.Eventually(t, func() bool { return !cachedIn(r, "", "turns") }, "the shared cache dropped turns", nil)
	wantGaugesMatchCache(t, r, "after turns became do_not_cache")
}
