package relay_test

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// cache.max_unreferenced bounds the resources kept once no client watches
// them: 0 keeps none, 1 keeps one (the most recently released); upstream.linger
// 0 unsubscribes them as soon as their last watcher left.
func TestMaxUnreferenced(t *testing.T) {
	for _, keep := range []int{0, 1} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			up := xdstest.StartUpstream(t)
			up.SetResources(clusters("c1", "c2"))
			r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Cache.MaxUnreferenced = keep
				c.Upstream.Linger = 0
			}))
			for _, name := range []string{"c1", "c2"} {
				c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n-" + name})
				c.Subscribe(resource.ClusterType, name)
				wantNames(t, c.RecvType(resource.ClusterType), name)
				c.Close()
				xdstest.Eventually(t, func() bool { return metricValue(t, r.Relay, "xds_relay_downstream_streams", nil) <= 0 },
					"the stream gone", nil)
			}
			cached := func() []string {
				var names []string
				for _, e := range r.DebugCache(relay.CacheFilter{Type: "Cluster"}) {
					names = append(names, e.Name)
				}
				return names
			}
			xdstest.Eventually(t, func() bool { return len(cached()) == keep }, fmt.Sprintf("%d cached", keep),
				func() any { return cached() })
			if keep == 1 {
				if got := cached(); got[0] != "c2" {
					t.Errorf("kept %v, want the last released, c2", got)
				}
			}
		})
	}
}
