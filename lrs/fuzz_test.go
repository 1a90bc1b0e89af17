package lrs_test

import (
	"math"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/lrs"
)

// Malformed reports — overflowing counters, non-finite metrics, unknown
// clusters, huge locality sets — never crash the aggregation, and the
// aggregate stays within its bound.
func FuzzAggregate(f *testing.F) {
	huge := &lrsv3.LoadStatsRequest{}
	for i := range 300 {
		cs := report(string(rune('a'+i%7)), string(rune(0x100+i)), math.MaxUint64, math.MaxUint64, 1, math.MaxUint64)
		cs.UpstreamLocalityStats[0].LoadMetricStats[0].TotalMetricValue = math.Inf(1)
		cs.UpstreamLocalityStats[0].UpstreamEndpointStats = []*endpointv3.UpstreamEndpointStats{{Address: addr("h"),
			TotalRequestsInProgress: 1}, {TotalSuccessfulRequests: 2}}
		huge.ClusterStats = append(huge.ClusterStats, cs)
	}
	for _, m := range []proto.Message{huge, &lrsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{
		report("c1", "z1", 1, 2, 3, 4), {}, {UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{}}}}}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, granularity bool) {
		req := &lrsv3.LoadStatsRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		const maxKeys = 50
		a := lrs.NewAggregator(maxKeys, nil)
		a.Add(1, req.GetClusterStats(), granularity)
		a.Add(2, req.GetClusterStats(), granularity)
		a.Forget(1)
		for range 2 {
			keys := 0
			for _, cs := range a.Take(time.Now(), nil) {
				keys++
				for _, ls := range cs.GetUpstreamLocalityStats() {
					keys += 1 + len(ls.GetUpstreamEndpointStats())
					if len(ls.GetLoadMetricStats()) > 64 {
						t.Fatalf("%d named metrics in one locality", len(ls.GetLoadMetricStats()))
					}
				}
			}
			if keys > maxKeys {
				t.Fatalf("%d entries in the aggregate, bound %d", keys, maxKeys)
			}
		}
	})
}
