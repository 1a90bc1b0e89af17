package relay_test

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A Delta ADS Envoy holding 10,001 clusters and their endpoints is told of
// their removal when the upstream deletes them, endpoints first: make before
// break holds back each endpoint's removal while the client's cluster refers
// to it, and sends it once the cluster is gone (unless the client, like
// Envoy, unsubscribed the endpoints of the clusters it lost first). Each response waits 10 s at
// most (xdstest.WaitTimeout): the removals must not wait for the relay to
// compare every removal with every resource the client holds.
func TestMakeBeforeBreakManyRemovalsReachTheClient(t *testing.T) {
	const n = 10_001
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%05d", i)
	}
	world := func(clustersOf, endpointsOf []string) xdstest.Resources {
		res := xdstest.Resources{}
		for _, c := range clustersOf {
			res[resource.ClusterType] = append(res[resource.ClusterType], xdstest.EDSCluster(c, c))
		}
		for _, c := range endpointsOf {
			res[resource.EndpointType] = append(res[resource.EndpointType], types.Resource(xdstest.Endpoints(c, "127.0.0.1:8080")))
		}
		return res
	}
	up := xdstest.StartUpstream(t)
	up.SetResources(world(names, names))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
	}))

	envoy := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, []string{"*"}, nil)
	holds := map[string]xdstest.DeltaHolds{resource.ClusterType: {}, resource.EndpointType: {}}
	// recv applies the next response as Envoy does: the endpoints of a
	// cluster it loses are unsubscribed.
	recv := func(what string) {
		t.Helper()
		resp, ok := envoy.TryRecv(xdstest.WaitTimeout)
		if !ok {
			t.Fatalf("%s: no response for %v; the client holds %d clusters and %d endpoints", what,
				xdstest.WaitTimeout, len(holds[resource.ClusterType]), len(holds[resource.EndpointType]))
		}
		holds[resp.GetTypeUrl()].Apply(resp)
		envoy.Ack(resp)
		if resp.GetTypeUrl() == resource.ClusterType && len(resp.GetRemovedResources()) > 0 {
			envoy.Subscribe(resource.EndpointType, nil, resp.GetRemovedResources())
			for _, c := range resp.GetRemovedResources() {
				delete(holds[resource.EndpointType], c) // (the relay's removal may cross the unsubscription)
			}
		}
	}
	for len(holds[resource.ClusterType]) < n {
		recv("the wildcard's clusters")
	}
	envoy.Subscribe(resource.EndpointType, names, nil)
	for len(holds[resource.EndpointType]) < n {
		recv("the clusters' endpoints")
	}

	from := len(up.Requests())
	up.SetResources(world(names, names[:1]))
	up.MustWait(t, "the relay's ACK of the endpoints' removal", func(s xdstest.Stats) bool {
		for _, req := range s.Requests[from:] {
			if req.TypeURL() == resource.EndpointType && req.Delta.GetResponseNonce() != "" {
				return true
			}
		}
		return false
	})
	up.SetResources(world(names[:1], names[:1]))
	for len(holds[resource.ClusterType]) > 1 || len(holds[resource.EndpointType]) > 1 {
		recv("the removals")
	}
}
