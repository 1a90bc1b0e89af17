package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A proxyless-gRPC-style client walks LDS → RDS → CDS → EDS by name; every
// response is ACKed and nothing more arrives.
func TestSotWNamedChainACKFlow(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	up.SetResources(xdstest.GRPCResources("svc", be.Addr()))
	r := xdstest.StartRelay(t, up.Addr())
	n := xdstest.NamesFor("svc")

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "client-1"})
	for _, step := range []struct{ typ, name string }{
		{resource.ListenerType, n.Listener}, {resource.RouteType, n.Route},
		{resource.ClusterType, n.Cluster}, {resource.EndpointType, n.Endpoints},
	} {
		c.Subscribe(step.typ, step.name)
		resp := c.RecvType(step.typ)
		wantNames(t, resp, step.name)
		if resp.GetVersionInfo() == "" || resp.GetNonce() == "" {
			t.Fatalf("%s response without version or nonce", step.typ)
		}
		c.Ack(resp)
	}
	c.ExpectNoResponse(quiet)
}

// Legacy wildcard (first request without names) and explicit "*" both get
// every cluster; naming clusters afterwards narrows the subscription.
func TestSotWWildcardTransitions(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2", "c3"))
	r := xdstest.StartRelay(t, up.Addr())

	legacy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "legacy"})
	legacy.Subscribe(resource.ClusterType)
	resp := legacy.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2", "c3")
	legacy.Ack(resp) // Envoy's legacy ACK carries no names: still a wildcard
	legacy.ExpectNoResponse(quiet)

	explicit := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "explicit"})
	explicit.Subscribe(resource.ClusterType, "*")
	resp = explicit.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2", "c3")
	explicit.Ack(resp)

	// Wildcard → named: the full-state response now carries only c2.
	explicit.Subscribe(resource.ClusterType, "c2")
	resp = explicit.RecvType(resource.ClusterType)
	wantNames(t, resp, "c2")
	explicit.Ack(resp)

	// Once names were sent, an empty list means nothing, not wildcard.
	explicit.Subscribe(resource.ClusterType)
	resp = explicit.RecvType(resource.ClusterType)
	wantNames(t, resp)
	explicit.Ack(resp)
	up.SetResources(clusters("c1", "c2", "c3", "c4"))
	resp = legacy.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2", "c3", "c4")
	explicit.ExpectNoResponse(quiet)
}

// xDS: a resource missing from a CDS full-state response is deleted; the
// relay's next full-state response omits it.
func TestSotWClusterRemoval(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr())

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	resp := c.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2")
	c.Ack(resp)

	up.SetResources(clusters("c2"))
	resp = c.RecvType(resource.ClusterType)
	wantNames(t, resp, "c2")
	c.Ack(resp)
	c.ExpectNoResponse(quiet)
}

// A subscribed EDS name that does not exist yet gets no response; when it
// appears upstream it is pushed.
func TestSotWEndpointsAppearLater(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	up.SetResources(xdstest.GRPCResources("svc", be.Addr()))
	r := xdstest.StartRelay(t, up.Addr())

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.EndpointType, "endpoints-later")
	c.ExpectNoResponse(quiet)

	up.SetResources(xdstest.MergeResources(xdstest.GRPCResources("svc", be.Addr()), xdstest.GRPCResources("later", be.Addr())))
	resp := c.RecvType(resource.EndpointType)
	wantNames(t, resp, "endpoints-later")
	c.Ack(resp)
	c.ExpectNoResponse(quiet)
}

// RDS/EDS subscription changes: a newly named resource is sent; a dropped one
// stops being pushed; a re-subscribed one is sent again even if unchanged.
func TestSotWSubscriptionChanges(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	res := xdstest.MergeResources(xdstest.GRPCResources("a", be.Addr()), xdstest.GRPCResources("b", be.Addr()))
	up.SetResources(res)
	r := xdstest.StartRelay(t, up.Addr())

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.EndpointType, "endpoints-a")
	resp := c.RecvType(resource.EndpointType)
	wantNames(t, resp, "endpoints-a")
	c.Ack(resp)

	c.Subscribe(resource.EndpointType, "endpoints-a", "endpoints-b")
	resp = c.RecvType(resource.EndpointType)
	wantNames(t, resp, "endpoints-b") // EDS responses may carry just what is new
	c.Ack(resp)

	c.Subscribe(resource.EndpointType, "endpoints-b")
	c.ExpectNoResponse(quiet)

	// Newly requested names are always sent, even when unchanged.
	c.Subscribe(resource.EndpointType, "endpoints-a", "endpoints-b")
	resp = c.RecvType(resource.EndpointType)
	wantNames(t, resp, "endpoints-a")
	c.Ack(resp)
	c.ExpectNoResponse(quiet)
}

// A NACK is not answered by a resend; the client gets the next version, and
// other clients are not affected.
func TestSotWNACKNoLoop(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())

	bad := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "bad"})
	good := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "good"})
	for _, c := range []*xdstest.ADSClient{bad, good} {
		c.Subscribe(resource.ClusterType, "*")
	}
	bad.Nack(bad.RecvType(resource.ClusterType), "rejected by test")
	good.Ack(good.RecvType(resource.ClusterType))
	bad.ExpectNoResponse(quiet)

	up.SetResources(clusters("c1", "c2"))
	resp := good.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2")
	good.Ack(resp)
	resp = bad.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", "c2")
	bad.Nack(resp, "again")
	bad.ExpectNoResponse(quiet)

	info := r.DebugClients("bad")
	if len(info) != 1 || info[0].Types[resource.ClusterType].LastNACK != "again" {
		t.Fatalf("debug clients for bad: %+v", info)
	}
}

// xDS: a SotW request whose nonce is not the latest sent is stale and
// ignored, subscription change included.
func TestSotWStaleNonceIgnored(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	up.SetResources(xdstest.MergeResources(xdstest.GRPCResources("a", be.Addr()), xdstest.GRPCResources("b", be.Addr())))
	r := xdstest.StartRelay(t, up.Addr())

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.EndpointType, "endpoints-a")
	first := c.RecvType(resource.EndpointType)
	c.Ack(first)
	c.Subscribe(resource.EndpointType, "endpoints-a", "endpoints-b")
	second := c.RecvType(resource.EndpointType)
	c.Ack(second)

	// A request carrying the first (stale) nonce with a new name: ignored.
	stale := xdstest.SotWRequest(resource.EndpointType, first.GetVersionInfo(), first.GetNonce(), "endpoints-a", "endpoints-b", "endpoints-c")
	if err := c.Send(stale); err != nil {
		t.Fatal(err)
	}
	c.ExpectNoResponse(quiet)
	if got := r.DebugClients("n")[0].Types[resource.EndpointType].Names; len(got) != 2 {
		t.Fatalf("stale request changed the subscription: %v", got)
	}
}
