package relay_test

import (
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Fifty clients with different node ids share one upstream stream; when they
// are gone, the upstream subscriptions are released after the linger.
func TestFiftyClientsOneUpstreamStream(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be := xdstest.StartBackend(t, "a")
	up.SetResources(xdstest.GRPCResources("svc", be.Addr()))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.Linger = 50 * time.Millisecond }))
	n := xdstest.NamesFor("svc")

	clients := make([]*xdstest.ADSClient, 50)
	for i := range clients {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("node-%d", i), Cluster: fmt.Sprintf("cluster-%d", i%7)})
		c.Subscribe(resource.ListenerType, n.Listener)
		c.Subscribe(resource.EndpointType, n.Endpoints)
		clients[i] = c
	}
	for _, c := range clients {
		for range 2 {
			c.Ack(c.MustRecv())
		}
	}
	if s := up.Stats(); s.TotalStreams != 1 {
		t.Fatalf("upstream saw %d streams, want 1", s.TotalStreams)
	}
	for _, req := range up.Requests() {
		if id := req.Node.GetId(); id != "xds-relay-test" {
			t.Fatalf("upstream saw node %q, want the relay's own", id)
		}
	}

	from := len(up.Requests())
	for _, c := range clients {
		c.Close()
	}
	for _, typ := range []string{resource.ListenerType, resource.EndpointType} {
		up.WaitRequest(t, from, "release of "+typ, func(req xdstest.Request) bool {
			return req.TypeURL() == typ && len(req.Names()) == 0
		})
	}
	if s := up.Stats(); s.TotalStreams != 1 {
		t.Fatalf("upstream saw %d streams, want 1", s.TotalStreams)
	}
}

// One upstream change reaches every watching client as exactly one response
// with identical bytes (encoded once), and the clients' ACKs cause nothing.
func TestFanOutOneResponsePerChange(t *testing.T) {
	up := xdstest.StartUpstream(t)
	be1 := xdstest.StartBackend(t, "a")
	be2 := xdstest.StartBackend(t, "b")
	up.SetResources(xdstest.GRPCResources("svc", be1.Addr()))
	r := xdstest.StartRelay(t, up.Addr())
	n := xdstest.NamesFor("svc")

	clients := make([]*xdstest.ADSClient, 20)
	for i := range clients {
		clients[i] = xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("node-%d", i)})
		clients[i].Subscribe(resource.EndpointType, n.Endpoints)
		clients[i].Ack(clients[i].RecvType(resource.EndpointType))
	}
	up.SetResources(xdstest.GRPCResources("svc", be2.Addr()))
	var version string
	for i, c := range clients {
		resp := c.RecvType(resource.EndpointType)
		if i == 0 {
			version = resp.GetVersionInfo()
		} else if resp.GetVersionInfo() != version {
			t.Fatalf("client %d got version %q, client 0 %q", i, resp.GetVersionInfo(), version)
		}
		c.Ack(resp)
	}
	for _, c := range clients {
		c.ExpectNoResponse(quiet / 3)
	}
}
