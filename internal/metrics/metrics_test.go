package metrics_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewRegistersEveryFamily(t *testing.T) {
	m := metrics.New()
	lds := metrics.TypeLabel(keying.ListenerType)

	m.DownstreamStreams.WithLabelValues(lds, metrics.ProtocolSotW).Inc()
	m.DownstreamClients.WithLabelValues(metrics.ProtocolSotW).Inc()
	m.CollectConnections(func() int { return 1 })
	m.Responses.WithLabelValues(lds, metrics.ProtocolDelta).Inc()
	m.ResponseBytes.WithLabelValues(lds, metrics.ProtocolSotW).Add(100)
	m.ACKs.WithLabelValues(lds, metrics.ProtocolSotW).Inc()
	m.NACKs.WithLabelValues(lds, metrics.ProtocolSotW).Inc()
	m.StaleNonces.WithLabelValues(metrics.ProtocolSotW).Inc()
	m.RejectedRequests.WithLabelValues("too_many_names").Inc()
	m.AdmissionRejections.Inc()
	m.UpstreamLastUpdate.WithLabelValues("").SetToCurrentTime()
	m.UpstreamRequests.WithLabelValues("", "subscribe").Inc()
	m.CacheLookups.WithLabelValues("", "hit").Inc()
	m.RolloutsStarted.Inc()
	m.Rollouts.WithLabelValues("", "halted").Inc()
	m.CollectUpstreamConnected(func() []metrics.UpstreamConn {
		return []metrics.UpstreamConn{{Server: "127.0.0.1:18000", Scope: metrics.ScopeShared, Streams: 1}}
	})
	m.CollectUpstreamFallback(func() []metrics.UpstreamFallback {
		return []metrics.UpstreamFallback{{Scope: metrics.ScopeShared, OnFallback: true}}
	})
	m.CollectReadiness(func() bool { return true }, func() bool { return false })
	m.BuildInfo.WithLabelValues("v1", "go1.26").Set(1)
	m.UpstreamResponses.WithLabelValues("", lds, metrics.ResultACK).Inc()
	m.UpstreamReconnects.WithLabelValues("", "127.0.0.1:18000").Inc()
	m.CollectCache(func() []metrics.CacheSize { return []metrics.CacheSize{{TypeURL: lds, Resources: 3, Bytes: 300}} })
	m.CacheEvictions.Inc()
	m.TP2Ambiguous.Inc()
	m.Propagation.Observe(0.02)

	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]dto.MetricType{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "xds_relay_") {
			got[f.GetName()] = f.GetType()
			if len(f.GetHelp()) < 20 {
				t.Errorf("%s: help %q is too short to be meaningful", f.GetName(), f.GetHelp())
			}
		}
	}
	want := map[string]dto.MetricType{
		"xds_relay_downstream_streams":                     dto.MetricType_GAUGE,
		"xds_relay_downstream_clients":                     dto.MetricType_GAUGE,
		"xds_relay_downstream_streams_waiting":             dto.MetricType_GAUGE,
		"xds_relay_downstream_connections":                 dto.MetricType_GAUGE,
		"xds_relay_responses_total":                        dto.MetricType_COUNTER,
		"xds_relay_response_bytes_total":                   dto.MetricType_COUNTER,
		"xds_relay_acks_total":                             dto.MetricType_COUNTER,
		"xds_relay_nacks_total":                            dto.MetricType_COUNTER,
		"xds_relay_stale_nonces_total":                     dto.MetricType_COUNTER,
		"xds_relay_rejected_requests_total":                dto.MetricType_COUNTER,
		"xds_relay_admission_rejections_total":             dto.MetricType_COUNTER,
		"xds_relay_upstream_last_update_timestamp_seconds": dto.MetricType_GAUGE,
		"xds_relay_upstream_requests_total":                dto.MetricType_COUNTER,
		"xds_relay_cache_lookups_total":                    dto.MetricType_COUNTER,
		"xds_relay_rollouts_started_total":                 dto.MetricType_COUNTER,
		"xds_relay_rollouts_total":                         dto.MetricType_COUNTER,
		"xds_relay_tp2_ambiguous_matches_total":            dto.MetricType_COUNTER,
		"xds_relay_upstream_connected":                     dto.MetricType_GAUGE,
		"xds_relay_upstream_fallback":                      dto.MetricType_GAUGE,
		"xds_relay_upstream_synced":                        dto.MetricType_GAUGE,
		"xds_relay_ready":                                  dto.MetricType_GAUGE,
		"xds_relay_build_info":                             dto.MetricType_GAUGE,
		"xds_relay_upstream_responses_total":               dto.MetricType_COUNTER,
		"xds_relay_upstream_reconnects_total":              dto.MetricType_COUNTER,
		"xds_relay_cache_resources":                        dto.MetricType_GAUGE,
		"xds_relay_cache_bytes":                            dto.MetricType_GAUGE,
		"xds_relay_cache_evictions_total":                  dto.MetricType_COUNTER,
		"xds_relay_propagation_seconds":                    dto.MetricType_HISTOGRAM,
		// Present at zero from the start (TestRareEventsStartAtZero).
		"xds_relay_cache_evictions_refused_total":    dto.MetricType_COUNTER,
		"xds_relay_removals_held_total":              dto.MetricType_COUNTER,
		"xds_relay_gateway_reports_total":            dto.MetricType_COUNTER,
		"xds_relay_gateway_upstream_responses_total": dto.MetricType_COUNTER,
		"xds_relay_lrs_reports_total":                dto.MetricType_COUNTER,
		"xds_relay_lrs_stats_dropped_total":          dto.MetricType_COUNTER,
		"xds_relay_lrs_client_streams":               dto.MetricType_GAUGE,
		"xds_relay_warm_file_writes_total":           dto.MetricType_COUNTER,
		"xds_relay_warm_file_bytes":                  dto.MetricType_GAUGE,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("families mismatch (-want +got):\n%s", diff)
	}

	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !hasFamily(families, name) {
			t.Errorf("%s missing: Go and process collectors must be registered", name)
		}
	}
	if got := value(t, m.ResponseBytes.WithLabelValues(lds, metrics.ProtocolSotW)); got != 100 {
		t.Errorf("response bytes = %v, want 100", got)
	}
}

func TestPropagationBuckets(t *testing.T) {
	m := metrics.New()
	var pb dto.Metric
	if err := m.Propagation.Write(&pb); err != nil {
		t.Fatal(err)
	}
	b := pb.GetHistogram().GetBucket()
	if first := b[0].GetUpperBound(); first != 0.001 {
		t.Errorf("first bucket = %v, want 0.001", first)
	}
	if last := b[len(b)-1].GetUpperBound(); last < 30 || last > 60 {
		t.Errorf("last bucket = %v, want about 30s", last)
	}
}

func TestNewIsIndependent(t *testing.T) {
	// Two relays in one process (tests) each get their own registry.
	a, b := metrics.New(), metrics.New()
	a.CacheEvictions.Inc()
	if got := value(t, b.CacheEvictions); got != 0 {
		t.Errorf("second Metrics sees the first one's counter: %v", got)
	}
}

func TestTypeLabel(t *testing.T) {
	tests := []struct{ in, want string }{
		{keying.ListenerType, keying.ListenerType},
		{keying.RouteType, keying.RouteType},
		{keying.ScopedRouteType, keying.ScopedRouteType},
		{keying.VirtualHostType, keying.VirtualHostType},
		{keying.ClusterType, keying.ClusterType},
		{keying.EndpointType, keying.EndpointType},
		{keying.SecretType, keying.SecretType},
		{keying.RuntimeType, keying.RuntimeType},
		{keying.ExtensionConfigType, keying.ExtensionConfigType},
		{"type.googleapis.com/envoy.config.listener.v3.Listener2", metrics.OtherType},
		{"type.googleapis.com/example.Foo", metrics.OtherType},
		{keying.ResourceWrapperType, metrics.OtherType},
		{"", metrics.OtherType},
	}
	for _, tt := range tests {
		if got := metrics.TypeLabel(tt.in); got != tt.want {
			t.Errorf("TypeLabel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func hasFamily(families []*dto.MetricFamily, name string) bool {
	for _, f := range families {
		if f.GetName() == name {
			return true
		}
	}
	return false
}

// value reads a counter or gauge.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := c.Write(&pb); err != nil {
		t.Fatal(err)
	}
	if pb.Counter != nil {
		return pb.GetCounter().GetValue()
	}
	return pb.GetGauge().GetValue()
}

// TestRareEventsStartAtZero: the counters of rare events have their known
// label sets at 0 from the start, so that the first event is an increase()
// an alert sees (a series born at 1 has none).
func TestRareEventsStartAtZero(t *testing.T) {
	m := metrics.New()
	m.InitUpstream("auth", []string{"cp:18000"}, []string{"wildcard"})
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	series := map[string]bool{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = true
		}
	}
	cds := "type_url=" + keying.ClusterType
	for _, want := range []string{
		"xds_relay_rollouts_total{result=halted," + cds + "}",
		"xds_relay_removals_held_total{reason=stale," + cds + "}",
		"xds_relay_cache_evictions_refused_total{" + cds + "}",
		"xds_relay_rejected_requests_total{reason=permission_denied}",
		"xds_relay_gateway_upstream_responses_total{protocol=gateway-delta,result=nack}",
		"xds_relay_gateway_reports_total{result=failed}",
		"xds_relay_lrs_reports_total{result=unforwarded}",
		"xds_relay_lrs_stats_dropped_total{reason=limit}",
		"xds_relay_upstream_reconnects_total{authority=auth,server=cp:18000}",
		"xds_relay_upstream_resyncs_total{authority=auth,reason=wildcard}",
		"xds_relay_warm_file_writes_total{file=cache,result=error}",
		"xds_relay_warm_file_writes_total{file=gateway,result=error}",
		"xds_relay_warm_file_bytes{file=cache}",
	} {
		if !series[want] {
			t.Errorf("no series %s at the start", want)
		}
	}
}

// TestWarmFileWritten: each round of a warm-restart file writer is counted
// by its result, and the size is that of the last file written.
func TestWarmFileWritten(t *testing.T) {
	m := metrics.New()
	m.WarmFileWritten(metrics.WarmFileCache, 100, false, nil)
	m.WarmFileWritten(metrics.WarmFileCache, 100, true, nil)
	m.WarmFileWritten(metrics.WarmFileCache, 120, false, errors.New("disk full"))
	for result, want := range map[string]float64{"ok": 1, "unchanged": 1, "error": 1} {
		if got := value(t, m.WarmFileWrites.WithLabelValues(metrics.WarmFileCache, result)); got != want {
			t.Errorf("writes{result=%s} = %v, want %v", result, got, want)
		}
	}
	if got := value(t, m.WarmFileBytes.WithLabelValues(metrics.WarmFileCache)); got != 100 {
		t.Errorf("bytes = %v, want 100 (the failed write is not on disk)", got)
	}
}
