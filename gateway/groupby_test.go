package gateway_test

import (
	"testing"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// gateway.group_by: [] (kept as written, not replaced by the default
// [cluster]) puts data planes of every cluster in one group: one upstream
// stream presenting the relay's own node and cluster, one snapshot for all.
func TestEmptyGroupByIsOneGroup(t *testing.T) {
	e := start(t, xdstest.WithConfig(func(c *config.Config) {
		c.Gateway = &config.Gateway{GroupBy: []string{}, ReportRetries: 3}
	}))
	snap, v := e.publish("xds-relay", 0) // the relay's node cluster (xdstest)
	for _, n := range []struct{ node, cluster string }{{"blue-1", "blue"}, {"green-1", "green"}} {
		dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
		dp.Send(subscribe(n.node, n.cluster, ""))
		resp := dp.MustRecv()
		wantSnapshot(t, resp, snap, v)
		dp.Send(ack(resp))
	}
	if n := upstreamStreams(e.cp, "xds-relay", false); n != 1 {
		t.Errorf("%d upstream streams for the relay's cluster, want 1 for both data planes", n)
	}
	if n := upstreamStreams(e.cp, "blue", false) + upstreamStreams(e.cp, "green", false); n != 0 {
		t.Errorf("%d upstream streams keyed by the data planes' clusters, want none", n)
	}
	groups := e.relay.DebugGateway("").Groups
	if len(groups) != 1 || groups[0].Streams != 2 || groups[0].UpstreamNode != "xds-relay-test" {
		t.Errorf("/debug/gateway groups = %+v, want one group of 2 streams presenting xds-relay-test", groups)
	}
}
