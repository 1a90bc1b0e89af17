package lrs_test

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// The load of an xdstp cluster goes to its authority's servers (gRFC A47),
// the rest to the default servers; an authority without servers of its
// own uses the default servers.
func TestAuthorityServers(t *testing.T) {
	def := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	auth := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: def.Addr()}},
		Authorities: map[string]lrs.Authority{"auth.example": {Upstreams: []lrs.Upstream{{URI: auth.Addr()}}}}})
	const (
		federated = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/c2"
		other     = "xdstp://other.example/envoy.config.cluster.v3.Cluster/c3"
	)
	c := r.client(t, "a")
	c.send(t, report("c1", "z1", 1, 0, 1, 0), report(federated, "z1", 2, 0, 2, 0), report(other, "z1", 3, 0, 3, 0))
	wantDef, wantAuth := sums{}, sums{}
	wantDef.add(report("c1", "z1", 1, 0, 1, 0), report(other, "z1", 3, 0, 3, 0))
	wantAuth.add(report(federated, "z1", 2, 0, 2, 0))
	for _, w := range []struct {
		u    *xdstest.LRSUpstream
		want sums
	}{{def, wantDef}, {auth, wantAuth}} {
		waitFor(t, w.u, "its clusters' load", func(stats []*endpointv3.ClusterStats) bool {
			got := sums{}
			got.add(stats...)
			return cmp.Equal(w.want, got)
		})
	}
}
