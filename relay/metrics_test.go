package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// An ADS stream that carries several types is one client in
// xds_relay_downstream_clients (the dashboard's fleet size), and one stream
// per type in xds_relay_downstream_streams.
func TestADSStreamIsOneClient(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n1"})
	c.Subscribe(resource.ClusterType, "c1")
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	c.Subscribe(resource.EndpointType, "c1")
	c.Subscribe(resource.ListenerType, "l1")

	sotw := map[string]string{"protocol": "sotw"}
	streams := func() float64 {
		return metricValue(t, r.Relay, "xds_relay_downstream_streams", map[string]string{"protocol": "sotw", "type_url": resource.EndpointType}) +
			metricValue(t, r.Relay, "xds_relay_downstream_streams", map[string]string{"protocol": "sotw", "type_url": resource.ListenerType}) +
			metricValue(t, r.Relay, "xds_relay_downstream_streams", map[string]string{"protocol": "sotw", "type_url": resource.ClusterType})
	}
	xdstest.Eventually(t, func() bool { return streams() == 3 }, "three types on the stream", func() any { return streams() })
	if got := metricValue(t, r.Relay, "xds_relay_downstream_clients", sotw); got != 1 {
		t.Errorf("xds_relay_downstream_clients{protocol=sotw} = %v, want 1", got)
	}
	c.Close()
	xdstest.Eventually(t, func() bool { return metricValue(t, r.Relay, "xds_relay_downstream_clients", sotw) == 0 },
		"the client gone", func() any { return metricValue(t, r.Relay, "xds_relay_downstream_clients", sotw) })
}

// Every log line names its authority once: strict JSON pipelines reject a
// key that appears twice.
func TestUpstreamLogNamesAuthorityOnce(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	up := xdstest.StartUpstream(t)
	xdstest.StartRelayLogged(t, zap.New(obs), up.Addr())
	xdstest.Eventually(t, func() bool { return logs.FilterMessage("connected to upstream").Len() > 0 },
		"the upstream connected", nil)
	for _, e := range logs.All() {
		n := 0
		for _, f := range e.Context {
			if f.Key == "authority" {
				n++
			}
		}
		if n > 1 {
			t.Errorf("%q carries the authority %d times: %v", e.Message, n, e.Context)
		}
	}
}
