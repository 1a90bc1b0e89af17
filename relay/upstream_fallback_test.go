package relay_test

import (
	"net"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// xds_relay_upstream_fallback is present for the default servers from the
// start, 1 while the relay is on a server after the first of the list (the
// control plane may be down behind a sibling that answers for it), and 0
// again once it is back on the first.
func TestUpstreamFallbackGauge(t *testing.T) {
	primary := xdstest.StartUpstream(t)
	secondary := xdstest.StartUpstream(t)
	primary.Stop()
	r := xdstest.StartRelay(t, primary.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers = append(c.Upstream.XDSServers, config.Server{ServerURI: secondary.Addr()})
	}))
	labels := map[string]string{"authority": "", "scope": "shared"}
	fallback := func() float64 { return metricValue(t, r.Relay, "xds_relay_upstream_fallback", labels) }
	if got := fallback(); got == -1 {
		t.Fatal("no xds_relay_upstream_fallback sample for the default servers at the start")
	}
	// The gauge is 1 from the first try of the secondary, before it connects.
	connected := func() float64 {
		return metricValue(t, r.Relay, "xds_relay_upstream_connected",
			map[string]string{"authority": "", "scope": "shared", "server": secondary.Addr()})
	}
	xdstest.Eventually(t, func() bool { return fallback() == 1 && connected() == 1 },
		"on fallback to the secondary, connected", func() any { return []float64{fallback(), connected()} })

	primary.Restart()
	secondary.Stop()
	xdstest.Eventually(t, func() bool { return fallback() == 0 }, "back on the primary", func() any { return fallback() })
}

// A relay whose first upstream server is the relay itself (a Service of the
// relays that includes this replica, say) refuses its own stream, so that it
// never serves what it knows as the upstream's word, and falls back to the
// next server.
func TestUpstreamThatIsTheRelayItselfIsRefused(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := xdstest.RelayConfig(lis.Addr().String(), lis.Addr().String())
	cfg.Upstream.XDSServers = append(cfg.Upstream.XDSServers, config.Server{ServerURI: up.Addr()})
	r, err := relay.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- r.Serve(lis) }()
	t.Cleanup(func() {
		r.Close()
		<-served
	})

	c := xdstest.DialADS(t, lis.Addr().String(), &core.Node{Id: "n1"})
	c.Subscribe(resource.ClusterType, "c1")
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	if got := metricValue(t, r, "xds_relay_upstream_fallback", map[string]string{"authority": "", "scope": "shared"}); got != 1 {
		t.Errorf("xds_relay_upstream_fallback = %v, want 1 (the first server is the relay itself)", got)
	}
	if got := metricValue(t, r, "xds_relay_rejected_requests_total", map[string]string{"reason": "node"}); got < 1 {
		t.Errorf("rejected_requests_total{reason=node} = %v, want the relay's own stream counted", got)
	}
}
