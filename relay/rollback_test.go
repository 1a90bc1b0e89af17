package relay_test

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
