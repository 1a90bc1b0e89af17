package relay_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A relay behind a sibling relay claims no more than the sibling knows: a
// name nobody cached, asked for while the control plane is down, gets the
// sibling's UNAVAILABLE (what a relay with only the dead control plane
// answers) passed through, not an empty answer or "does not exist", for SotW
// and Delta clients, over either protocol to the sibling (issue 25, item 1).
func TestSiblingUnavailablePassedThrough(t *testing.T) {
	for _, protocol := range []string{"auto", "sotw"} {
		for _, typ := range []string{resource.ClusterType, resource.EndpointType} {
			t.Run(protocol+"/"+typ[len(typ)-12:], func(t *testing.T) { siblingUnavailable(t, protocol, typ) })
		}
	}
}

// siblingUnavailable runs TestSiblingUnavailablePassedThrough for one
// protocol to the sibling and one type.
func siblingUnavailable(t *testing.T, protocol, typ string) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	sibling := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(cfg *config.Config) {
		cfg.Upstream.UnavailableAfter = 200 * time.Millisecond
		cfg.Upstream.Authorities = map[string]config.Authority{"xds.example.com": {}}
	}))
	warm := xdstest.DialADS(t, sibling.Addr(), &core.Node{Id: "warm"})
	warm.Subscribe(resource.ClusterType, "c1")
	wantNames(t, warm.RecvType(resource.ClusterType), "c1")

	// The relay's own waits outlast the test: an UNAVAILABLE it sends is
	// the sibling's.
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(cfg *config.Config) {
		cfg.Upstream.UnavailableAfter = time.Minute
		cfg.Upstream.DoesNotExistAfter = time.Minute
		cfg.Upstream.XDSServers = []config.Server{{ServerURI: up.Addr()}, {ServerURI: sibling.Addr(), Protocol: protocol}}
		cfg.Upstream.Authorities = map[string]config.Authority{"xds.example.com": {}}
	}))
	held := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "held"})
	held.Subscribe(resource.ClusterType, "c1")
	wantNames(t, held.RecvType(resource.ClusterType), "c1")
	up.Stop()
	// Asked before the relay reached its sibling, of an authority both serve
	// from their default servers.
	early := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "early"})
	never3 := "xdstp://xds.example.com/" + typ[len("type.googleapis.com/"):] + "/never3"
	early.Subscribe(typ, never3)
	waitSotWError(t, early, never3)
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_connected",
			map[string]string{"scope": "shared", "server": sibling.Addr()}) == 1
	}, "the relay on its sibling", nil)

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	c.Subscribe(typ, "c1", "never")
	waitSotWError(t, c, "never")

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(typ, []string{"c1", "never2"}, nil)
	var code codes.Code
	for code == 0 {
		dresp := d.MustRecv()
		for _, e := range dresp.GetResourceErrors() {
			code = codes.Code(e.GetErrorDetail().GetCode())
		}
		if len(dresp.GetRemovedResources()) > 0 {
			t.Fatalf("Delta: %v, want UNAVAILABLE for never2", dresp)
		}
		d.Ack(dresp)
	}
	if code != codes.Unavailable {
		t.Errorf("Delta: want UNAVAILABLE for never2, got %v", code)
	}
	direct := xdstest.DialADS(t, sibling.Addr(), &core.Node{Id: "direct"})
	direct.Subscribe(typ, "never")
	if got := errorsByName(direct.RecvType(typ)); got["never"] != codes.Unavailable {
		t.Errorf("the sibling to its own client: resource_errors %v, want UNAVAILABLE for never", got)
	}
}

// waitSotWError reads c's responses until one carries a resource error for
// name, and fails unless it is UNAVAILABLE.
func waitSotWError(t *testing.T, c *xdstest.ADSClient, name string) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := c.Recv(ctx)
		cancel()
		if err != nil {
			t.Fatalf("no resource error for %s: %v", name, err)
		}
		c.Ack(resp)
		if code, ok := errorsByName(resp)[name]; ok {
			if code != codes.Unavailable {
				t.Fatalf("resource error %v for %s, want UNAVAILABLE", code, name)
			}
			return
		}
	}
}
