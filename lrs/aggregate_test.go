package lrs_test

import (
	"math"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/lrs"
)

func loc(zone string) *corev3.Locality { return &corev3.Locality{Region: "r", Zone: zone} }

func addr(host string) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 80}}}}
}

// report is one client's ClusterStats of cluster c in zone z.
func report(c, z string, ok, errs, issued, inProgress uint64) *endpointv3.ClusterStats {
	return &endpointv3.ClusterStats{ClusterName: c, ClusterServiceName: c + "-eds",
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: loc(z),
			TotalSuccessfulRequests: ok, TotalErrorRequests: errs, TotalIssuedRequests: issued,
			TotalRequestsInProgress: inProgress,
			LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: "cpu", NumRequestsFinishedWithMetric: ok,
				TotalMetricValue: float64(ok) / 2}}}},
		TotalDroppedRequests: errs,
		DroppedRequests:      []*endpointv3.ClusterStats_DroppedRequests{{Category: "lb", DroppedCount: errs}}}
}

func ignoreInterval() cmp.Option {
	return protocmp.IgnoreFields(&endpointv3.ClusterStats{}, "load_report_interval")
}

func TestAggregateSums(t *testing.T) {
	a := lrs.NewAggregator(0, nil)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", 10, 1, 11, 3), report("c2", "z1", 5, 0, 5, 0)}, false)
	a.Add(2, []*endpointv3.ClusterStats{report("c1", "z1", 20, 2, 22, 4)}, false)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", 1, 0, 1, 2)}, false) // a later report: 2 in progress now
	got := a.Take(time.Now(), nil)
	want := []*endpointv3.ClusterStats{
		{ClusterName: "c1", ClusterServiceName: "c1-eds", TotalDroppedRequests: 3,
			DroppedRequests: []*endpointv3.ClusterStats_DroppedRequests{{Category: "lb", DroppedCount: 3}},
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: loc("z1"),
				TotalSuccessfulRequests: 31, TotalErrorRequests: 3, TotalIssuedRequests: 34, TotalRequestsInProgress: 6,
				LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: "cpu", NumRequestsFinishedWithMetric: 31,
					TotalMetricValue: 15.5}}}}},
		{ClusterName: "c2", ClusterServiceName: "c2-eds",
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: loc("z1"),
				TotalSuccessfulRequests: 5, TotalIssuedRequests: 5,
				LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{{MetricName: "cpu", NumRequestsFinishedWithMetric: 5,
					TotalMetricValue: 2.5}}}}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreInterval()); diff != "" {
		t.Errorf("aggregate (-want +got):\n%s", diff)
	}
}

func TestAggregateInterval(t *testing.T) {
	a := lrs.NewAggregator(0, nil)
	start := time.Now()
	a.Take(start, nil)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", 1, 0, 1, 0)}, false)
	got := a.Take(start.Add(7*time.Second), nil)
	if len(got) != 1 || !cmp.Equal(got[0].GetLoadReportInterval(), durationpb.New(7*time.Second), protocmp.Transform()) {
		t.Errorf("interval = %v, want 7s", got)
	}
	if got := a.Take(start.Add(9*time.Second), nil); got != nil {
		t.Errorf("an interval without load: %v, want nothing", got)
	}
}

// In progress is each connected client's latest value, reported in every
// interval until the client reports 0 or its stream ends; counters are
// reported once.
func TestAggregateInProgress(t *testing.T) {
	a := lrs.NewAggregator(0, nil)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", 5, 0, 5, 7)}, false)
	a.Add(2, []*endpointv3.ClusterStats{report("c1", "z1", 5, 0, 5, 1)}, false)
	a.Take(time.Now(), nil)
	got := a.Take(time.Now(), nil)
	ls := got[0].GetUpstreamLocalityStats()[0]
	if ls.GetTotalRequestsInProgress() != 8 || ls.GetTotalSuccessfulRequests() != 0 {
		t.Errorf("second interval: %v, want 8 in progress and no counter", ls)
	}
	a.Forget(1)
	got = a.Take(time.Now(), nil)
	if n := got[0].GetUpstreamLocalityStats()[0].GetTotalRequestsInProgress(); n != 1 {
		t.Errorf("after client 1 left: %d in progress, want 1", n)
	}
	a.Add(2, []*endpointv3.ClusterStats{report("c1", "z1", 0, 0, 0, 0)}, false)
	if got := a.Take(time.Now(), nil); got != nil {
		t.Errorf("nothing in progress: %v, want no report", got)
	}
}

func TestAggregateEndpointGranularity(t *testing.T) {
	stats := func(host string, ok uint64) []*endpointv3.ClusterStats {
		cs := report("c1", "z1", ok, 0, ok, 0)
		cs.DroppedRequests, cs.TotalDroppedRequests = nil, 0
		cs.UpstreamLocalityStats[0].LoadMetricStats = nil
		cs.UpstreamLocalityStats[0].UpstreamEndpointStats = []*endpointv3.UpstreamEndpointStats{
			{Address: addr(host), TotalSuccessfulRequests: ok, TotalIssuedRequests: ok, TotalRequestsInProgress: 1}}
		return []*endpointv3.ClusterStats{cs}
	}
	for _, granularity := range []bool{false, true} {
		a := lrs.NewAggregator(0, nil)
		a.Add(1, stats("h1", 1), granularity)
		a.Add(2, stats("h1", 2), granularity)
		a.Add(2, stats("h2", 4), granularity)
		want := &endpointv3.UpstreamLocalityStats{Locality: loc("z1"), TotalSuccessfulRequests: 7, TotalIssuedRequests: 7}
		if granularity {
			want.UpstreamEndpointStats = []*endpointv3.UpstreamEndpointStats{
				{Address: addr("h1"), TotalSuccessfulRequests: 3, TotalIssuedRequests: 3, TotalRequestsInProgress: 2},
				{Address: addr("h2"), TotalSuccessfulRequests: 4, TotalIssuedRequests: 4, TotalRequestsInProgress: 1},
			}
		}
		got := a.Take(time.Now(), nil)[0].GetUpstreamLocalityStats()[0]
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("granularity %v (-want +got):\n%s", granularity, diff)
		}
	}
}

// Only the clusters the upstream asks for are reported.
func TestAggregateKeep(t *testing.T) {
	a := lrs.NewAggregator(0, nil)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", 1, 0, 1, 0), report("c2", "z1", 1, 0, 1, 0)}, false)
	got := a.Take(time.Now(), func(c string) bool { return c == "c2" })
	if len(got) != 1 || got[0].GetClusterName() != "c2" {
		t.Errorf("kept %v, want c2 only", got)
	}
}

func TestAggregateSaturates(t *testing.T) {
	a := lrs.NewAggregator(0, nil)
	a.Add(1, []*endpointv3.ClusterStats{report("c1", "z1", math.MaxUint64-1, 0, 0, 0)}, false)
	a.Add(2, []*endpointv3.ClusterStats{report("c1", "z1", 5, 0, 0, 0)}, false)
	got := a.Take(time.Now(), nil)
	if n := got[0].GetUpstreamLocalityStats()[0].GetTotalSuccessfulRequests(); n != math.MaxUint64 {
		t.Errorf("sum = %d, want saturated", n)
	}
}

func TestAggregateBounded(t *testing.T) {
	dropped := map[string]int{}
	a := lrs.NewAggregator(10, func(r string, n int) { dropped[r] += n })
	var stats []*endpointv3.ClusterStats
	for i := range 100 {
		stats = append(stats, report("c1", string(rune('a'+i)), 1, 0, 1, 1))
	}
	a.Add(1, stats, false)
	got := a.Take(time.Now(), nil)
	if n := len(got[0].GetUpstreamLocalityStats()); n != 9 { // the cluster is one key
		t.Errorf("%d localities, want 9", n)
	}
	if dropped[lrs.DropLimit] != 91 {
		t.Errorf("dropped %v, want 91 over the limit", dropped)
	}
	a.Add(1, []*endpointv3.ClusterStats{{ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
		Locality: loc("a"), TotalSuccessfulRequests: 1,
		CpuUtilization: &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: 1, TotalMetricValue: math.NaN()}}}}}, false)
	if dropped[lrs.DropInvalid] != 1 {
		t.Errorf("dropped %v, want the NaN counted invalid", dropped)
	}
}

// The drop reasons are the metric's known label values.
func TestDropReasonsAreKnownLabels(t *testing.T) {
	for _, r := range []string{lrs.DropLimit, lrs.DropInvalid, lrs.DropDenied} {
		if !slices.Contains(metrics.LRSDropReasons, r) {
			t.Errorf("reason %q is not in metrics.LRSDropReasons %v", r, metrics.LRSDropReasons)
		}
	}
}
