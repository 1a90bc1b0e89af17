package relay_test

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// A relay that shuts down sends its upstream the load aggregated since its
// last report: an upstream interval far away loses nothing.
func TestShutdownFlushesLoad(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Resp: &lrsv3.LoadStatsResponse{SendAllClusters: true,
		LoadReportingInterval: durationpb.New(time.Hour)}})
	r := xdstest.StartRelay(t, u.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Shutdown.DrainWindow = 100 * time.Millisecond
	}))
	st, ctx := openLRS(t, r.Addr())
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("no LoadStatsResponse: %v", err)
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{ClusterName: "c1",
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalSuccessfulRequests: 7, TotalIssuedRequests: 7}}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		s := r.DebugLRS()
		if s.Clusters == 1 && len(s.Upstreams) == 1 && s.Upstreams[0].State == lrs.StateEstablished {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the report is not in flight to an established upstream stream: %+v", s)
		case <-time.After(10 * time.Millisecond):
		}
	}
	r.Shutdown(ctx)
	_, got := u.Received()
	if len(got) != 1 || got[0].GetClusterName() != "c1" || got[0].GetUpstreamLocalityStats()[0].GetTotalSuccessfulRequests() != 7 {
		t.Errorf("after Shutdown the upstream has %v, want c1's 7 requests", got)
	}
}
