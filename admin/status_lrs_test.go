package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// The status page's LRS section shows the reporting streams, the clusters
// of the interval in flight, the LRS counters and each upstream LRS stream
// with its state and last interval flushed.
func TestStatusPageLRS(t *testing.T) {
	f := newFake(t, statusConfig())
	last := time.Date(2026, 11, 28, 3, 4, 5, 0, time.UTC)
	f.lrs = lrs.Status{ClientStreams: 12, Clusters: 3, Upstreams: []lrs.UpstreamStatus{
		{Server: "a.example:1", State: lrs.StateEstablished, Clusters: 2, Reports: 7, LastReport: last,
			LastInterval: 10 * time.Second},
		{Authority: "auth.example", Group: "cluster=blue", Server: "c.example:3", State: lrs.StateBackoff,
			LastError: "connection <refused>", Clusters: 1},
	}}
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xds_relay_lrs_reports_total"}, []string{"result"})
	reports.WithLabelValues("received").Add(40)
	reports.WithLabelValues("sent").Add(7)
	reports.WithLabelValues("unforwarded").Add(2)
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xds_relay_lrs_stats_dropped_total"}, []string{"reason"})
	dropped.WithLabelValues("limit").Add(5)
	dropped.WithLabelValues("denied").Add(1)
	f.reg.MustRegister(reports, dropped)

	o := admin.OverviewOf(f)
	want := admin.LRSOverview{ClientStreams: 12, Clusters: 3, Upstreams: f.lrs.Upstreams, StatsDropped: 6,
		Reports: map[string]float64{"received": 40, "sent": 7, "unforwarded": 2}}
	if !reflect.DeepEqual(o.LRS, want) {
		t.Errorf("LRS overview = %+v, want %+v", o.LRS, want)
	}

	srv := httptest.NewServer(admin.Handler(f))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
	for _, w := range []string{`id="lrs-streams">12<`, `id="lrs-clusters">3<`, `id="lrs-received">40<`, `id="lrs-sent">7<`,
		`id="lrs-unforwarded">2<`, `id="lrs-dropped">6<`,
		`data-authority="" data-group=""`, `class="state ok">established<`, `class="n reports">7<`,
		`class="last-report">2026-11-28T03:04:05Z (covered 10 s)<`,
		`data-authority="auth.example" data-group="cluster=blue"`, `class="state warn">backoff<`,
		`class="last-report">never<`, `connection &lt;refused&gt;`} {
		if !strings.Contains(page, w) {
			t.Errorf("status page lacks %q", w)
		}
	}
}

// An idle relay's LRS section says that no client has reported, and the
// JSON has the section with empty lists.
func TestStatusPageLRSIdle(t *testing.T) {
	srv := statusAdmin(t, statusConfig())
	page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
	if !strings.Contains(page, `id="lrs-streams">0<`) || !strings.Contains(page, "no upstream LRS stream") {
		t.Errorf("idle status page's LRS section is wrong:\n%s", page)
	}
	var got struct {
		LRS map[string]any `json:"lrs"`
	}
	js := do(t, http.MethodGet, srv.URL+"/?format=json", nil, "").body
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"client_streams": 0.0, "clusters": 0.0, "stats_dropped": 0.0, "upstreams": []any{},
		"reports": map[string]any{"received": 0.0, "sent": 0.0, "unforwarded": 0.0}}
	if !reflect.DeepEqual(got.LRS, want) {
		t.Errorf("idle overview JSON's lrs = %v, want %v", got.LRS, want)
	}
}

// On a serving relay the section follows a real client's report to an
// upstream LRS server.
func TestOverviewLRSServingRelay(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := xdstest.StartRelay(t, u.Addr())
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := lrsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "a"}, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: "c1", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalSuccessfulRequests: 3}}}}}); err != nil {
		t.Fatal(err)
	}
	o := waitOverview(t, r, "one reporting stream, its report sent upstream", func(o admin.Overview) bool {
		return o.LRS.ClientStreams == 1 && o.LRS.Reports["received"] == 1 && o.LRS.Reports["sent"] >= 1 &&
			len(o.LRS.Upstreams) == 1 && o.LRS.Upstreams[0].Reports >= 1
	})
	if us := o.LRS.Upstreams[0]; us.Server != u.Addr() || us.State != lrs.StateEstablished || us.LastReport.IsZero() {
		t.Errorf("upstream LRS stream = %+v, want established on %s with a report", us, u.Addr())
	}
}
