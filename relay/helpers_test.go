package relay_test

import (
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// quiet is how long a test waits to prove that nothing arrives.
const quiet = 300 * time.Millisecond

// names returns the names of resp's resources, in order (field 1 of every
// envoy resource type).
func names(t *testing.T, resp *discoverygrpc.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		b := a.GetValue()
		name := ""
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatalf("bad resource bytes")
			}
			b = b[n:]
			if num == 1 && typ == protowire.BytesType {
				v, m := protowire.ConsumeString(b)
				name = v
				b = b[m:]
				break
			}
			m := protowire.ConsumeFieldValue(num, typ, b)
			b = b[m:]
		}
		out = append(out, name)
	}
	return out
}

func wantNames(t *testing.T, resp *discoverygrpc.DiscoveryResponse, want ...string) {
	t.Helper()
	got := names(t, resp)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s response names = %v, want %v", resp.GetTypeUrl(), got, want)
	}
}

// clusters builds a CDS-only resource set of EDS clusters.
func clusters(names ...string) xdstest.Resources {
	var rs []types.Resource
	for _, n := range names {
		rs = append(rs, xdstest.EDSCluster(n, "eds-"+n))
	}
	return xdstest.Resources{resource.ClusterType: rs}
}

// withCluster returns a copy of res with one more cluster.
func withCluster(res xdstest.Resources, c *cluster.Cluster) xdstest.Resources {
	out := xdstest.Resources{}
	for k, v := range res {
		out[k] = slices.Clone(v)
	}
	out[resource.ClusterType] = append(out[resource.ClusterType], c)
	return out
}
