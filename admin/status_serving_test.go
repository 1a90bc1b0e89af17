package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/relay"
)

// The headline says what the relay serves from: a ready relay that is not
// on its control plane is amber, with the reason, never "ready" in green.
func TestStatusHeadline(t *testing.T) {
	tests := []struct {
		name     string
		ready    bool
		synced   float64
		state    string
		fallback float64
		want     admin.ServingOverview
	}{
		{"synced and connected", true, 1, "connected", 0, admin.ServingOverview{State: admin.ServingReady, Class: "ok",
			Headline: "ready", Synced: true, Down: []string{}, OnFallback: []string{}}},
		{"warm file, upstream in backoff", true, 0, "backoff", 0, admin.ServingOverview{State: admin.ServingWarmCache,
			Class: "warn", Headline: "serving the warm-restart cache; upstream not answered since start",
			Down: []string{""}, OnFallback: []string{}}},
		{"outage after a sync", true, 1, "backoff", 0, admin.ServingOverview{State: admin.ServingCache, Class: "warn",
			Headline: "serving the cache; upstream not connected for (default)", Synced: true, Down: []string{""},
			OnFallback: []string{}}},
		{"on fallback (gauge)", true, 1, "connected", 1, admin.ServingOverview{State: admin.ServingFallback,
			Class: "warn", Headline: "serving from a fallback server for (default): the first server of the list is unreachable",
			Synced: true, Down: []string{}, OnFallback: []string{""}}},
		{"not ready", false, 0, "backoff", 0, admin.ServingOverview{State: admin.ServingNotReady, Class: "bad",
			Headline: "not ready", Down: []string{""}, OnFallback: []string{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, statusConfig())
			f.ready, f.reason = tc.ready, "the reason"
			f.ups = []relay.UpstreamInfo{{Server: "127.0.0.1:1", State: tc.state}}
			synced := prometheus.NewGauge(prometheus.GaugeOpts{Name: "xds_relay_upstream_synced"})
			synced.Set(tc.synced)
			fallback := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xds_relay_upstream_fallback"}, []string{"authority", "scope"})
			fallback.WithLabelValues("", "shared").Set(tc.fallback)
			f.reg.MustRegister(synced, fallback)

			tc.want.Reason = "the reason"
			if got := admin.OverviewOf(f).Serving; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("serving = %+v, want %+v", got, tc.want)
			}
			srv := httptest.NewServer(admin.Handler(f))
			defer srv.Close()
			defer srv.Client().CloseIdleConnections()
			page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
			want := fmt.Sprintf(`data-state="%s" id="ready" class="%s">%s<`, tc.want.State, tc.want.Class, tc.want.Headline)
			if !strings.Contains(page, want) {
				t.Errorf("status page lacks %q", want)
			}
		})
	}
}

// NACKs are grouped by (type, rejected version, message), the largest group
// first, with the count of streams and some of their nodes.
func TestStatusNACKGroups(t *testing.T) {
	f := newFake(t, statusConfig())
	nack := func(id uint64, node, version, msg string) relay.ClientInfo {
		return relay.ClientInfo{ID: id, NodeID: node, Protocol: "sotw", Service: "ads", Types: map[string]downstream.TypeInfo{
			resource.ClusterType: {SentVersion: version, AckedVersion: "v1", LastNACK: msg}}}
	}
	for i := range 7 {
		f.clients = append(f.clients, nack(uint64(i+1), fmt.Sprintf("envoy-%d", i), "v2", "bad cluster"))
	}
	f.clients = append(f.clients, nack(8, "envoy-0", "v3", "bad cluster"), nack(9, "grpc-1", "v2", "other"),
		relay.ClientInfo{ID: 10, NodeID: "fine", Types: map[string]downstream.TypeInfo{resource.ClusterType: {}}})

	o := admin.OverviewOf(f)
	want := []admin.NACKGroup{
		{Type: resource.ClusterType, Version: "v2", Message: "bad cluster", Streams: 7,
			Nodes: []string{"envoy-0", "envoy-1", "envoy-2", "envoy-3", "envoy-4"}},
		{Type: resource.ClusterType, Version: "v2", Message: "other", Streams: 1, Nodes: []string{"grpc-1"}},
		{Type: resource.ClusterType, Version: "v3", Message: "bad cluster", Streams: 1, Nodes: []string{"envoy-0"}},
	}
	if !reflect.DeepEqual(o.NACKs, want) || o.NACKsTotal != 9 || o.NACKGroups != 3 {
		t.Errorf("NACKs = %+v (%d streams, %d groups), want %+v", o.NACKs, o.NACKsTotal, o.NACKGroups, want)
	}
	srv := httptest.NewServer(admin.Handler(f))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
	for _, w := range []string{`id="nacks-current">9<`, `id="nack-groups">3<`, `<td class="n streams">7</td>`} {
		if !strings.Contains(page, w) {
			t.Errorf("status page lacks %q", w)
		}
	}
	if n := strings.Count(page, `<tr class="nack"`); n != 3 {
		t.Errorf("status page has %d NACK rows, want 3 groups", n)
	}
}
