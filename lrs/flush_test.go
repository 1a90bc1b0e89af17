package lrs_test

import (
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// waitStatus waits until cond holds of the relay's LRS status.
func waitStatus(t *testing.T, r *relayLRS, what string, cond func(lrs.Status) bool) lrs.Status {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		st := r.srv.Status()
		if cond(st) {
			return st
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("within 10s: %s; status %+v", what, st)
		}
	}
}

// waitReceived waits until the relay has read n client reports.
func waitReceived(t *testing.T, r *relayLRS, n float64) {
	t.Helper()
	waitStatus(t, r, "the clients' reports read", func(lrs.Status) bool {
		return testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSReceived)) >= n
	})
}

// established reports whether every destination's upstream stream is up.
func established(st lrs.Status) bool {
	for _, u := range st.Upstreams {
		if u.State != lrs.StateEstablished {
			return false
		}
	}
	return len(st.Upstreams) > 0
}

// Close flushes the interval in flight: an upstream whose interval is far
// away still receives, before the relay is closed, everything its clients
// reported.
func TestCloseFlushesIntervalInFlight(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Resp: &lrsv3.LoadStatsResponse{SendAllClusters: true,
		LoadReportingInterval: durationpb.New(time.Hour)}})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}, FlushTimeout: 10 * time.Second})
	c := r.client(t, "a")
	waitResponse(t, c, u.Resp)
	waitStatus(t, r, "the upstream stream established", established)
	want := sums{}
	for i := range 3 {
		s := report("c1", "z1", uint64(i+1), 1, uint64(i+2), 0)
		want.add(s)
		c.send(t, s)
	}
	waitReceived(t, r, 3)
	if _, stats := u.Received(); len(stats) != 0 {
		t.Fatalf("the upstream received %v before the hour-long interval ended", stats)
	}
	r.srv.Close()
	got := sums{}
	_, stats := u.Received()
	got.add(stats...)
	if !cmp.Equal(want, got) {
		t.Errorf("after Close the upstream has %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSSent)); n != 1 {
		t.Errorf("reports sent = %v, want 1 (the flush)", n)
	}
	if n := testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSUnforwarded)); n != 0 {
		t.Errorf("reports unforwarded = %v, want 0", n)
	}
	for _, us := range r.srv.Status().Upstreams {
		if us.State != lrs.StateClosed || us.Reports != 1 || us.LastReport.IsZero() || us.LastInterval <= 0 {
			t.Errorf("upstream status after Close = %+v, want closed with the one report", us)
		}
	}
}

// An upstream that never ends the stream after the flush does not hold
// Close beyond FlushTimeout; the report was sent all the same.
func TestCloseFlushBounded(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Resp: &lrsv3.LoadStatsResponse{SendAllClusters: true,
		LoadReportingInterval: durationpb.New(time.Hour)}, Linger: true})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}, FlushTimeout: 50 * time.Millisecond})
	c := r.client(t, "a")
	waitResponse(t, c, u.Resp)
	waitStatus(t, r, "the upstream stream established", established)
	c.send(t, report("c1", "z1", 1, 0, 1, 0))
	waitReceived(t, r, 1)
	r.srv.Close() // returns: the flush wait is bounded
	waitFor(t, u, "the flushed report", func(stats []*endpointv3.ClusterStats) bool { return len(stats) == 1 })
}

// Without an established upstream stream there is nothing to flush to: the
// aggregate is counted unforwarded, and Close does not wait.
func TestCloseWithoutUpstreamCountsUnforwarded(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Hold: hold})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}, FirstAnswerWait: 10 * time.Millisecond})
	c := r.client(t, "a")
	c.next(t) // the relay's default
	c.send(t, report("c1", "z1", 1, 0, 1, 0))
	waitStatus(t, r, "c1 in the interval in flight, the upstream unanswered", func(st lrs.Status) bool {
		return st.Clusters == 1 && len(st.Upstreams) == 1 && st.Upstreams[0].State == lrs.StateConnecting
	})
	r.srv.Close()
	if n := testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSUnforwarded)); n != 1 {
		t.Errorf("reports unforwarded = %v, want 1", n)
	}
	if _, stats := u.Received(); len(stats) != 0 {
		t.Errorf("the upstream received %v before it answered", stats)
	}
}
