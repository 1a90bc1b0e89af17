package relay_test

import (
	"testing"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
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
	xdstest.Eventually(t, func() bool { return fallback() == 1 }, "on fallback to the secondary",
		func() any { return fallback() })
	connected := metricValue(t, r.Relay, "xds_relay_upstream_connected",
		map[string]string{"authority": "", "scope": "shared", "server": secondary.Addr()})
	if connected != 1 {
		t.Errorf("xds_relay_upstream_connected to the secondary = %v, want 1", connected)
	}

	primary.Restart()
	secondary.Stop()
	xdstest.Eventually(t, func() bool { return fallback() == 0 }, "back on the primary", func() any { return fallback() })
}
