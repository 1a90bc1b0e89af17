package relay_test

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// BenchmarkOneClusterChangeBytes measures the bytes each client receives for
// one cluster changing among 1,000: a wildcard SotW client gets the full
// state again, a wildcard Delta client gets the one resource. Run with
// -benchtime=Nx; the figures are per client per change.
func BenchmarkOneClusterChangeBytes(b *testing.B) {
	const clusters, clients = 1000, 20
	set := func(gen int) xdstest.Resources {
		cs := make([]types.Resource, 0, clusters)
		for i := range clusters {
			eds := fmt.Sprintf("eds-%d", i)
			if i == 0 {
				eds = fmt.Sprintf("eds-0-gen-%d", gen)
			}
			cs = append(cs, xdstest.EDSCluster(fmt.Sprintf("cluster-%04d", i), eds))
		}
		return xdstest.Resources{resource.ClusterType: cs}
	}
	for _, proto_ := range []string{"sotw", "delta"} {
		b.Run(proto_, func(b *testing.B) {
			up := xdstest.StartUpstream(b)
			up.SetResources(set(0))
			r := xdstest.StartRelay(b, up.Addr())
			var sotw []*xdstest.ADSClient
			var delta []*xdstest.DeltaClient
			for i := range clients {
				node := &core.Node{Id: fmt.Sprintf("n%d", i)}
				if proto_ == "sotw" {
					c := xdstest.DialADS(b, r.Addr(), node)
					c.Subscribe(resource.ClusterType)
					c.Ack(c.RecvType(resource.ClusterType))
					sotw = append(sotw, c)
				} else {
					c := xdstest.DialDelta(b, r.Addr(), node)
					c.Subscribe(resource.ClusterType, []string{"*"}, nil)
					c.Ack(c.MustRecv())
					delta = append(delta, c)
				}
			}
			var bytes, resources int
			b.ResetTimer()
			for n := range b.N {
				up.SetResources(set(n + 1))
				for _, c := range sotw {
					resp := c.RecvType(resource.ClusterType)
					bytes += proto.Size(resp)
					resources += len(resp.GetResources())
					c.Ack(resp)
				}
				for _, c := range delta {
					resp := c.MustRecv()
					bytes += proto.Size(resp)
					resources += len(resp.GetResources())
					c.Ack(resp)
				}
			}
			b.StopTimer()
			per := float64(b.N * clients)
			b.ReportMetric(float64(bytes)/per, "bytes/client/change")
			b.ReportMetric(float64(resources)/per, "resources/client/change")
		})
	}
}
