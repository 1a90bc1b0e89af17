// Package metrics defines every Prometheus metric of xds-relay, registered on
// a registry the relay owns (never the global one). Label values are bounded:
// type URLs are reduced by TypeLabel, and no label is per client or per
// resource name. All fields are safe for concurrent use.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xds-relay/xds-relay/keying"
)

// Metrics is the relay's set of metrics.
type Metrics struct {
	Registry *prometheus.Registry

	DownstreamStreams     *prometheus.GaugeVec
	DownstreamConnections prometheus.Gauge
	Responses             *prometheus.CounterVec
	ResponseBytes         *prometheus.CounterVec
	ACKs                  *prometheus.CounterVec
	NACKs                 *prometheus.CounterVec
	StaleNonces           *prometheus.CounterVec
	RejectedRequests      *prometheus.CounterVec

	UpstreamConnected  *prometheus.GaugeVec
	UpstreamResponses  *prometheus.CounterVec
	UpstreamReconnects *prometheus.CounterVec

	CacheResources *prometheus.GaugeVec
	CacheBytes     *prometheus.GaugeVec
	CacheEvictions prometheus.Counter

	Propagation prometheus.Histogram
}

// New returns the metrics registered on a fresh registry, with the Go runtime
// and process collectors.
func New() *Metrics {
	const ns = "xds_relay"
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		DownstreamStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "downstream_streams",
			Help: "Open downstream xDS streams, by type URL served (empty for ADS) and protocol (sotw, delta)."},
			[]string{"type_url", "protocol"}),
		DownstreamConnections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "downstream_connections",
			Help: "Open downstream gRPC connections."}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "responses_total",
			Help: "Responses sent to downstream clients."}, []string{"type_url", "protocol"}),
		ResponseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "response_bytes_total",
			Help: "Bytes of responses sent to downstream clients."}, []string{"type_url", "protocol"}),
		ACKs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "acks_total",
			Help: "Responses acknowledged by downstream clients."}, []string{"type_url", "protocol"}),
		NACKs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "nacks_total",
			Help: "Responses rejected (NACKed) by downstream clients."}, []string{"type_url", "protocol"}),
		StaleNonces: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stale_nonces_total",
			Help: "Downstream requests ignored because their nonce was not the latest sent."}, []string{"protocol"}),
		RejectedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rejected_requests_total",
			Help: "Downstream requests refused with an error status, by reason."}, []string{"reason"}),
		UpstreamConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "upstream_connected",
			Help: "1 while the relay has a stream to the upstream server, else 0."}, []string{"authority", "server"}),
		UpstreamResponses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_responses_total",
			Help: "Responses received from upstream servers, by result (ack, nack)."}, []string{"authority", "type_url", "result"}),
		UpstreamReconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_reconnects_total",
			Help: "Upstream streams lost."}, []string{"authority", "server"}),
		CacheResources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "cache_resources",
			Help: "Resources held in the cache."}, []string{"type_url"}),
		CacheBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "cache_bytes",
			Help: "Bytes of resources held in the cache."}, []string{"type_url"}),
		CacheEvictions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "cache_evictions_total",
			Help: "Unreferenced resources evicted from the cache."}),
		Propagation: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "propagation_seconds",
			Help:    "Time from receiving a change upstream to a downstream client's ACK of it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.DownstreamStreams, m.DownstreamConnections, m.Responses, m.ResponseBytes, m.ACKs, m.NACKs,
		m.StaleNonces, m.RejectedRequests, m.UpstreamConnected, m.UpstreamResponses, m.UpstreamReconnects,
		m.CacheResources, m.CacheBytes, m.CacheEvictions, m.Propagation,
	)
	return m
}

var wellKnown = map[string]bool{
	keying.ListenerType: true, keying.RouteType: true, keying.ScopedRouteType: true, keying.VirtualHostType: true,
	keying.ClusterType: true, keying.EndpointType: true, keying.SecretType: true, keying.RuntimeType: true,
	keying.ExtensionConfigType: true, "": true,
}

// TypeLabel returns the label value for typeURL: the type URL itself for the
// well-known envoy types, "other" for anything else, so that what clients send
// cannot grow label cardinality.
func TypeLabel(typeURL string) string {
	if wellKnown[typeURL] {
		return typeURL
	}
	return "other"
}
