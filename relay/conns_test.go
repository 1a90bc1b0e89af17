package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// xds_relay_downstream_connections counts a client connection from its
// start to its end, without a grpc stats handler (issue 26): it is counted
// where the relay tracks its connections for the drain.
func TestConnectionGaugeCountsBeginAndEnd(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	conns := func() float64 { return metricValue(t, r.Relay, "xds_relay_downstream_connections", nil) }
	before := conns()

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n1"})
	c.Subscribe(resource.ClusterType, "c1")
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	if got := conns(); got != before+1 {
		t.Errorf("xds_relay_downstream_connections = %v with a client connected, want %v", got, before+1)
	}
	c.Close()
	xdstest.Eventually(t, func() bool { return conns() == before }, "the connection gone", func() any { return conns() })
}
