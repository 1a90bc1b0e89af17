package lrs_test

import (
	"fmt"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// sums are the counters of some reports, by "cluster/zone" (and
// "cluster/drops").
type sums map[string][4]uint64

func (s sums) add(stats ...*endpointv3.ClusterStats) {
	for _, cs := range stats {
		k := cs.GetClusterName() + "/drops"
		v := s[k]
		v[0] += cs.GetTotalDroppedRequests()
		s[k] = v
		for _, ls := range cs.GetUpstreamLocalityStats() {
			k := cs.GetClusterName() + "/" + ls.GetLocality().GetZone()
			v := s[k]
			v[0] += ls.GetTotalSuccessfulRequests()
			v[1] += ls.GetTotalErrorRequests()
			v[2] += ls.GetTotalIssuedRequests()
			for _, m := range ls.GetLoadMetricStats() {
				v[3] += m.GetNumRequestsFinishedWithMetric()
			}
			s[k] = v
		}
	}
}

// waitFor waits until cond holds of what the upstream received.
func waitFor(t *testing.T, u *xdstest.LRSUpstream, what string, cond func([]*endpointv3.ClusterStats) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if _, stats := u.Received(); cond(stats) {
			return
		}
		select {
		case <-u.Got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			_, stats := u.Received()
			t.Fatalf("within 10s: %s; the upstream received %v", what, stats)
		}
	}
}

// waitResponse waits for a response of c equal to want, skipping others.
func waitResponse(t *testing.T, c *client, want *lrsv3.LoadStatsResponse) {
	t.Helper()
	for {
		got := c.next(t)
		if cmp.Equal(want, got, protocmp.Transform()) {
			return
		}
		t.Logf("response %v, waiting for %v", got, want)
	}
}

// Several clients report through the relay: the upstream receives, on one
// stream presenting the relay's node, sums equal to what they reported.
func TestClientsReportsReachUpstreamSummed(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}})
	want := sums{}
	var clients []*client
	for i := range 3 {
		c := r.client(t, fmt.Sprintf("client-%d", i))
		waitResponse(t, c, u.Resp)
		clients = append(clients, c)
	}
	for round := range 5 {
		for i, c := range clients {
			stats := []*endpointv3.ClusterStats{
				report("c1", "z1", uint64(10*i+round), uint64(i), uint64(10*i+round+i), 0),
				report("c1", "z2", 3, 0, 3, 0),
				report("c2", "z1", uint64(round), 1, uint64(round+1), 0),
			}
			want.add(stats...)
			c.send(t, stats...)
		}
		time.Sleep(30 * time.Millisecond) // spread the rounds over several upstream intervals
	}
	waitFor(t, u, "the clients' sums", func(stats []*endpointv3.ClusterStats) bool {
		got := sums{}
		got.add(stats...)
		return cmp.Equal(want, got)
	})
	nodes, _ := u.Received()
	if len(nodes) == 0 || nodes[0].GetId() != "xds-relay-1" {
		t.Errorf("upstream saw nodes %v, want the relay's", nodes)
	}
	if n := testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSReceived)); n != 15 {
		t.Errorf("reports received = %v, want 15", n)
	}
	if n := testutil.ToFloat64(r.m.LRSClientStreams); n != 3 {
		t.Errorf("client streams = %v, want 3", n)
	}
}

// In progress is the sum of the connected clients' latest values: a client
// whose stream ended contributes nothing further.
func TestInProgressOfConnectedClients(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}})
	a, b := r.client(t, "a"), r.client(t, "b")
	a.send(t, report("c1", "z1", 1, 0, 1, 5))
	b.send(t, report("c1", "z1", 1, 0, 1, 3))
	latest := func(stats []*endpointv3.ClusterStats) uint64 {
		if len(stats) == 0 {
			return 0
		}
		return stats[len(stats)-1].GetUpstreamLocalityStats()[0].GetTotalRequestsInProgress()
	}
	waitFor(t, u, "8 in progress", func(s []*endpointv3.ClusterStats) bool { return latest(s) == 8 })
	a.cancel()
	waitFor(t, u, "3 in progress once a left", func(s []*endpointv3.ClusterStats) bool { return latest(s) == 3 })
}

// A client's first answer waits a moment for the upstream's wishes; then it
// gets the relay's default, and the upstream's wishes as soon as they
// arrive.
func TestDefaultUntilUpstreamAnswers(t *testing.T) {
	hold := make(chan struct{})
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Hold: hold, Resp: &lrsv3.LoadStatsResponse{Clusters: []string{"c1"},
		LoadReportingInterval: durationpb.New(time.Second), ReportEndpointGranularity: true}})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}, FirstAnswerWait: 50 * time.Millisecond})
	c := r.client(t, "a")
	want := &lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(lrs.DefaultInterval)}
	if got := c.next(t); !cmp.Equal(want, got, protocmp.Transform()) {
		t.Errorf("first response %v, want the default %v", got, want)
	}
	close(hold)
	waitResponse(t, c, u.Resp)
}

// An upstream without LRS: clients are still answered, and the aggregate
// is counted as not forwarded.
func TestUnimplementedUpstream(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Unimplemented: true})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}, DefaultInterval: 50 * time.Millisecond,
		FirstAnswerWait: 50 * time.Millisecond})
	c := r.client(t, "a")
	c.next(t)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(r.m.LRSReports.WithLabelValues(metrics.LRSUnforwarded)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no report counted unforwarded within 10s")
		}
		c.send(t, report("c1", "z1", 1, 0, 1, 0))
		time.Sleep(20 * time.Millisecond)
	}
}

// Without clients the relay opens no upstream LRS stream (an upstream
// without LRS is then never bothered, nor logged about).
func TestNoClientsNoUpstreamStream(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}})
	select {
	case <-u.Got:
		nodes, _ := u.Received()
		t.Errorf("the upstream was asked by %v without any client", nodes)
	case <-time.After(300 * time.Millisecond):
	}
}

// A client's first answer is the upstream's wishes when the upstream
// answers in time: grpc-go keeps the first answer for its stream's life.
func TestFirstAnswerIsUpstreams(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}}})
	for _, id := range []string{"a", "b"} {
		if got := r.client(t, id).next(t); !cmp.Equal(u.Resp, got, protocmp.Transform()) {
			t.Errorf("client %s: first answer %v, want the upstream's %v", id, got, u.Resp)
		}
	}
}
