package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/xds-relay/xds-relay/config"
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

// An upstream response the relay NACKs is counted in
// xds_relay_upstream_responses_total{result="nack"} (the alert
// XdsRelayUpstreamResponsesRejected reads it), and an accepted one as "ack".
func TestUpstreamNACKCounted(t *testing.T) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
	}))
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n1"})
	c.Subscribe(resource.ClusterType, "c1")
	s := f.stream(t)
	s.nextNames(resource.ClusterType, "c1")
	s.send(resource.ClusterType, "1", xdstest.GRPCListener("l1", "r1")) // another type's resource: invalid
	if req := s.next(resource.ClusterType); req.GetErrorDetail() == nil {
		t.Fatalf("the invalid response was not NACKed: %v", req)
	}
	result := func(res string) float64 {
		return metricValue(t, r.Relay, "xds_relay_upstream_responses_total",
			map[string]string{"authority": "", "type_url": resource.ClusterType, "result": res})
	}
	if got := result("nack"); got != 1 {
		t.Errorf(`xds_relay_upstream_responses_total{result="nack"} = %v, want 1`, got)
	}
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("c1", "eds-c1"))
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	if got := result("ack"); got != 1 {
		t.Errorf(`xds_relay_upstream_responses_total{result="ack"} = %v, want 1`, got)
	}
}
