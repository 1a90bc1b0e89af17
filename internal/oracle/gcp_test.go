package oracle

import (
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// TestGCPKeepsADroppedWatch: go-control-plane drops a relay's RDS watch for
// [r5 r7] when a snapshot adds r14; the next snapshot, back to r5 and r7,
// answers it (seed 221757).
func TestGCPKeepsADroppedWatch(t *testing.T) {
	u := &Upstream{}
	u.useGCP()
	k := u.gcp.cache
	routes := func(v string, names ...string) *cache.Snapshot {
		var rs []types.Resource
		for _, n := range names {
			rs = append(rs, &route.RouteConfiguration{Name: n, VirtualHosts: []*route.VirtualHost{{Name: v}}})
		}
		s, err := cache.NewSnapshot(v, map[string][]types.Resource{resource.RouteType: rs})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := k.setSnapshot(routes("i1", "r5", "r7")); err != nil {
		t.Fatal(err)
	}
	names := []string{"r5", "r7"}
	req := &discoverypb.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: names, VersionInfo: "i1"}
	sub := stream.NewSotwSubscription(names, true)
	sub.SetReturnedResources(map[string]string{"r5": "i1", "r7": "i1"}) // the relay ACKs i1
	ch := make(chan cache.Response, 1)
	cancel, err := k.CreateWatch(req, sub, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if err := k.setSnapshot(routes("i2", "r5", "r7", "r14")); err != nil {
		t.Fatal(err)
	}
	if err := k.setSnapshot(routes("i3", "r5", "r7")); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-ch:
		if v, _ := resp.GetVersion(); v != "i3" {
			t.Fatalf("answered with %s, want i3", v)
		}
	case <-time.After(20 * time.Second): // sent synchronously by setSnapshot: a generous bound
		t.Fatal("the watch go-control-plane dropped for i2 was never answered")
	}
}
