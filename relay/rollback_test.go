package relay_test

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// No rollback: a Delta client that comes from a replica whose upstream had a
// newer cluster (initial_resource_versions names another version) is not
// sent the relay's copy while the relay's upstream is away — it may be
// older — and gets the upstream's word once it is back. It was sent the
// older copy at once.
func TestDeltaNoRollbackFromUnconfirmedCopy(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	a := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	a.Ack(a.MustRecv())

	up.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"server": up.Addr()}) > 0
	}, "the upstream's stream gone", nil)

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"c1"},
		InitialResourceVersions: map[string]string{"c1": "v-elsewhere"}})
	for deadline := time.Now().Add(quiet); time.Now().Before(deadline); {
		if resp, ok := d.TryRecv(50 * time.Millisecond); ok {
			for _, res := range resp.GetResources() {
				t.Fatalf("sent %s at the relay's unconfirmed version %s over the client's own", res.GetName(), res.GetVersion())
			}
			d.Ack(resp)
		}
	}

	newer := xdstest.EDSCluster("c1", "eds-newer")
	up.SetResources(xdstest.Resources{resource.ClusterType: []types.Resource{newer}})
	up.Restart()
	for {
		resp := d.MustRecv()
		d.Ack(resp)
		for _, res := range resp.GetResources() {
			c := &cluster.Cluster{}
			if err := res.GetResource().UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			if got := c.GetEdsClusterConfig().GetServiceName(); got != "eds-newer" {
				t.Fatalf("sent c1 with service %q, want the upstream's eds-newer", got)
			}
			return
		}
	}
}

// No rollback on SotW either, for the types whose responses carry only what
// changed (EDS, RDS): a client that comes from another replica (its first
// request carries a version) is not sent the relay's copy of endpoints while
// the relay's upstream is away — it may be older than the client's — and
// gets the upstream's word once it is back.
func TestSotWNoRollbackFromUnconfirmedCopy(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.EndpointType: []types.Resource{xdstest.Endpoints("e1", "127.0.0.1:1")}})
	r := xdstest.StartRelay(t, up.Addr())
	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.EndpointType, "e1")
	a.Ack(a.MustRecv())

	up.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"server": up.Addr()}) > 0
	}, "the upstream's stream gone", nil)

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.EndpointType, "v-elsewhere", "e1")
	// The relay answers a subscription from its cache at once: a quiet
	// while shows it holds the answer back.
	moved.ExpectNoResponse(quiet)

	up.SetResources(xdstest.Resources{resource.EndpointType: []types.Resource{xdstest.Endpoints("e1", "127.0.0.1:2")}})
	up.Restart()
	resp := moved.MustRecv()
	moved.Ack(resp)
	for _, a := range resp.GetResources() {
		e := &endpoint.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(e); err != nil {
			t.Fatal(err)
		}
		got := e.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		if got != 2 {
			t.Fatalf("sent e1 with port %d, want the upstream's 2", got)
		}
		return
	}
	t.Fatal("a response without e1")
}
