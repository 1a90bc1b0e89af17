package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestSotWNamedChain(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	up.SetResources(xdstest.GRPCResources("svc", be.Addr()))
	r := xdstest.StartRelay(t, up.Addr())
	n := xdstest.NamesFor("svc")

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "client-1"})
	c.Subscribe(resource.ListenerType, n.Listener)
	lds := c.RecvType(resource.ListenerType)
	if len(lds.Resources) != 1 {
		t.Fatalf("LDS: %d resources", len(lds.Resources))
	}
	c.Ack(lds)
	c.Subscribe(resource.RouteType, n.Route)
	rds := c.RecvType(resource.RouteType)
	c.Ack(rds)
	c.Subscribe(resource.ClusterType, n.Cluster)
	cds := c.RecvType(resource.ClusterType)
	c.Ack(cds)
	c.Subscribe(resource.EndpointType, n.Endpoints)
	eds := c.RecvType(resource.EndpointType)
	c.Ack(eds)
	c.ExpectNoResponse(200e6)
}
