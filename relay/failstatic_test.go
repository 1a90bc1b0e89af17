package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// With the upstream down, connected clients keep their streams, a new client
// is served from the cache, and when the upstream returns with a change every
// client receives it.
func TestUpstreamDownServesCache(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be1 := xdstest.StartBackend(t, "a")
	be2 := xdstest.StartBackend(t, "b")
	up.SetResources(xdstest.GRPCResources("svc", be1.Addr()))
	r := xdstest.StartRelay(t, up.Addr())
	n := xdstest.NamesFor("svc")

	old := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "old"})
	old.Subscribe(resource.EndpointType, n.Endpoints)
	first := old.RecvType(resource.EndpointType)
	old.Ack(first)

	up.Stop()
	fresh := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "new"})
	fresh.Subscribe(resource.EndpointType, n.Endpoints)
	resp := fresh.RecvType(resource.EndpointType)
	if resp.GetVersionInfo() != first.GetVersionInfo() {
		t.Fatalf("cached response version %q, want %q", resp.GetVersionInfo(), first.GetVersionInfo())
	}
	fresh.Ack(resp)
	old.ExpectNoResponse(quiet)

	up.SetResources(xdstest.GRPCResources("svc", be2.Addr()))
	up.Restart()
	for _, c := range []*xdstest.ADSClient{old, fresh} {
		resp := c.RecvType(resource.EndpointType)
		if resp.GetVersionInfo() == first.GetVersionInfo() {
			t.Fatal("client did not get the upstream's change")
		}
		c.Ack(resp)
	}
}
