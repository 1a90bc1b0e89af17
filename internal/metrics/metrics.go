// Package metrics defines every Prometheus metric of xds-relay, registered on
// a registry of its own (never the global one), with the label values bounded:
// type URLs go through TypeLabel.
//
// A Metrics is created once per Relay by New. Its collectors are safe for
// concurrent use; the struct itself is read-only after New.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xds-relay/xds-relay/keying"
)

// Label values used with the metrics below.
const (
	// ProtocolSotW and ProtocolDelta are the values of the "protocol" label.
	ProtocolSotW  = "sotw"
	ProtocolDelta = "delta"
	// ResultACK and ResultNACK are the values of the "result" label of
	// UpstreamResponses.
	ResultACK  = "ack"
	ResultNACK = "nack"
	// OtherType is the type_url label of every type URL TypeLabel does not know.
	OtherType = "other"
)

// Metrics holds every metric of the relay. Fields are set by New and never
// change.
type Metrics struct {
	// Registry holds every collector below plus the Go and process collectors.
	Registry *prometheus.Registry

	// Downstream (clients of the relay).

	// DownstreamStreams is xds_relay_downstream_streams{type_url,protocol}.
	DownstreamStreams *prometheus.GaugeVec
	// DownstreamClients is xds_relay_downstream_clients{protocol}: open
	// client streams, each once whatever types it carries.
	DownstreamClients *prometheus.GaugeVec
	// StreamsWaiting is xds_relay_downstream_streams_waiting: streams with
	// changes to send that wait for their client to read what it was sent.
	StreamsWaiting prometheus.Gauge
	// Responses is xds_relay_responses_total{type_url,protocol}.
	Responses *prometheus.CounterVec
	// ResponseBytes is xds_relay_response_bytes_total{type_url,protocol}.
	ResponseBytes *prometheus.CounterVec
	// ACKs is xds_relay_acks_total{type_url,protocol}.
	ACKs *prometheus.CounterVec
	// NACKs is xds_relay_nacks_total{type_url,protocol}.
	NACKs *prometheus.CounterVec
	// StaleNonces is xds_relay_stale_nonces_total{protocol}.
	StaleNonces *prometheus.CounterVec
	// RejectedRequests is xds_relay_rejected_requests_total{reason}.
	RejectedRequests *prometheus.CounterVec
	// AdmissionRejections is xds_relay_admission_rejections_total.
	AdmissionRejections prometheus.Counter

	// Upstream (authoritative control planes).

	// xds_relay_upstream_connected{authority,server,scope} is collected at
	// each scrape from the function given to CollectUpstreamConnected.
	// UpstreamResponses is xds_relay_upstream_responses_total{authority,type_url,result}.
	UpstreamResponses *prometheus.CounterVec
	// UpstreamLastUpdate is xds_relay_upstream_last_update_timestamp_seconds{authority}:
	// when the authority last sent an accepted update (time() minus it is the
	// age of the data served).
	UpstreamLastUpdate *prometheus.GaugeVec
	// UpstreamRequests is xds_relay_upstream_requests_total{authority,op}:
	// subscription changes the relay asked of an upstream (op: subscribe,
	// unsubscribe), each carried by a request.
	UpstreamRequests *prometheus.CounterVec
	// UpstreamReconnects is xds_relay_upstream_reconnects_total{authority,server}.
	UpstreamReconnects *prometheus.CounterVec
	// UpstreamResyncs is xds_relay_upstream_resyncs_total{authority,reason}:
	// new streams the relay started, on a live connection, to ask the
	// upstream for its word (reason: does_not_exist, wildcard, rejected).
	UpstreamResyncs *prometheus.CounterVec
	// UpstreamApplyPanics is xds_relay_upstream_apply_panics_total{authority,type_url}:
	// upstream updates whose application panicked (a relay bug); each
	// response is NACKed and the stream keeps working.
	UpstreamApplyPanics *prometheus.CounterVec

	// Cache.

	// xds_relay_cache_resources{type_url} and xds_relay_cache_bytes{type_url}
	// are computed at each scrape from the function given to CollectCache.
	// CacheLookups is xds_relay_cache_lookups_total{type_url,result}: a
	// newly watched name found in the cache (hit: answered at once) or not
	// (miss: answered when the upstream sends it).
	CacheLookups *prometheus.CounterVec
	// RolloutsStarted is xds_relay_rollouts_started_total; Rollouts is
	// xds_relay_rollouts_total{type_url,result}: guarded rollouts resolved
	// (released, halted).
	RolloutsStarted prometheus.Counter
	Rollouts        *prometheus.CounterVec
	// CacheEvictions is xds_relay_cache_evictions_total.
	CacheEvictions prometheus.Counter
	// EvictionsRefused is xds_relay_cache_evictions_refused_total{type_url}:
	// resources the LRU pushed out that a stream still watched, kept.
	EvictionsRefused *prometheus.CounterVec
	// TP2Ambiguous is xds_relay_tp2_ambiguous_matches_total.
	TP2Ambiguous prometheus.Counter
	// RemovalsHeld is xds_relay_removals_held_total{type_url,reason}: times
	// a stream held back telling its client a resource is gone (reason:
	// unknown — the cache does not know it is gone; stale — the cache is not
	// confirmed by a live upstream; referenced — the client still holds
	// something that references it).
	RemovalsHeld *prometheus.CounterVec

	// Propagation is xds_relay_propagation_seconds: from the receipt of an
	// upstream response to a client's ACK of the version that carries it.
	Propagation prometheus.Histogram

	// gateway.control.v1 (its streams, responses, ACKs and NACKs are
	// counted above with the protocol gateway-sotw or gateway-delta).

	// GatewayGroups is xds_relay_gateway_groups{protocol}: snapshot groups,
	// each with one upstream stream; GatewayUpstreamConnected those whose
	// upstream stream is up and answered.
	GatewayGroups            *prometheus.GaugeVec
	GatewayUpstreamConnected *prometheus.GaugeVec
	// GatewayUpstreamResponses is
	// xds_relay_gateway_upstream_responses_total{protocol,result}.
	GatewayUpstreamResponses *prometheus.CounterVec
	// GatewayDataplanes is xds_relay_gateway_dataplanes{version,ready}: data
	// planes by their latest status report.
	GatewayDataplanes *prometheus.GaugeVec
	// GatewayReports is xds_relay_gateway_reports_total{result}: received,
	// forwarded, failed (after the retries), dropped (too many pending).
	GatewayReports *prometheus.CounterVec

	// Load reporting (LRS).

	// LRSClientStreams is xds_relay_lrs_client_streams: open client
	// StreamLoadStats streams.
	LRSClientStreams prometheus.Gauge
	// LRSReports is xds_relay_lrs_reports_total{result}: client reports
	// received, aggregated reports sent upstream, and aggregated reports
	// not forwarded (unforwarded: no upstream takes them).
	LRSReports *prometheus.CounterVec
	// LRSStatsDropped is xds_relay_lrs_stats_dropped_total{reason}: client
	// stats entries (clusters, localities, endpoints, metrics) not
	// aggregated: limit, invalid, denied.
	LRSStatsDropped *prometheus.CounterVec

	// Warm-restart files (cache.persist_path and its .gateway file).

	// WarmFileWrites is xds_relay_warm_file_writes_total{file,result}: the
	// Writer's rounds for a warm-restart file (file: WarmFileCache,
	// WarmFileGateway) that wrote it (ok), failed (error), or found nothing
	// changed since the last write and left the file alone (unchanged).
	WarmFileWrites *prometheus.CounterVec
	// WarmFileBytes is xds_relay_warm_file_bytes{file}: the size of the file
	// last written.
	WarmFileBytes *prometheus.GaugeVec

	// Process.

	// BuildInfo is xds_relay_build_info{version,goversion}, always 1.
	BuildInfo *prometheus.GaugeVec
}

// Values of the scope label of xds_relay_upstream_connected: the kinds of
// relay scopes (each with its own upstream streams), aggregated so that the
// label's cardinality stays bounded however many node groups and nodes there
// are.
const (
	ScopeShared = "shared" // the cache every client uses by default
	ScopeGroup  = "group"  // the node groups of keying.group_by, together
	ScopeNode   = "node"   // the nodes' own scopes (secrets, do_not_cache), together
)

// UpstreamConn is one sample of xds_relay_upstream_connected: how many
// upstream streams of scopes of kind Scope are connected to Server of
// Authority.
type UpstreamConn struct {
	Authority, Server, Scope string
	Streams                  int
}

// CollectUpstreamConnected registers xds_relay_upstream_connected, whose
// samples f returns at each scrape. f must be safe for concurrent use.
func (m *Metrics) CollectUpstreamConnected(f func() []UpstreamConn) {
	m.Registry.MustRegister(upstreamConnected(f))
}

var upstreamConnectedDesc = prometheus.NewDesc(namespace+"_upstream_connected",
	"Upstream ADS streams established to a server, by scope kind: shared (0 or 1), group (node groups together), "+
		"node (nodes' own scopes together). Present for every configured default server from the start: 0 means not connected.",
	[]string{"authority", "server", "scope"}, nil)

// upstreamConnected collects xds_relay_upstream_connected from a function.
type upstreamConnected func() []UpstreamConn

func (upstreamConnected) Describe(ch chan<- *prometheus.Desc) { ch <- upstreamConnectedDesc }

func (f upstreamConnected) Collect(ch chan<- prometheus.Metric) {
	for _, c := range f() {
		ch <- prometheus.MustNewConstMetric(upstreamConnectedDesc, prometheus.GaugeValue, float64(c.Streams),
			c.Authority, c.Server, c.Scope)
	}
}

// UpstreamFallback is one sample of xds_relay_upstream_fallback: whether
// an upstream client of Authority in scopes of kind Scope is on a server
// that is not the first of its list.
type UpstreamFallback struct {
	Authority, Scope string
	OnFallback       bool
}

// CollectUpstreamFallback registers xds_relay_upstream_fallback, whose
// samples f returns at each scrape. f must be safe for concurrent use.
func (m *Metrics) CollectUpstreamFallback(f func() []UpstreamFallback) {
	m.Registry.MustRegister(upstreamFallback(f))
}

var upstreamFallbackDesc = prometheus.NewDesc(namespace+"_upstream_fallback",
	"1 while an upstream client of the authority (\"\": the default servers) is connected to, or trying, a server "+
		"that is not the first of its list (fallback: the control plane may be down behind it), else 0; by scope kind "+
		"as xds_relay_upstream_connected (1 when any client of that kind is). Present for the default servers from the start.",
	[]string{"authority", "scope"}, nil)

// upstreamFallback collects xds_relay_upstream_fallback from a function.
type upstreamFallback func() []UpstreamFallback

func (upstreamFallback) Describe(ch chan<- *prometheus.Desc) { ch <- upstreamFallbackDesc }

func (f upstreamFallback) Collect(ch chan<- prometheus.Metric) {
	for _, s := range f() {
		v := 0.0
		if s.OnFallback {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(upstreamFallbackDesc, prometheus.GaugeValue, v, s.Authority, s.Scope)
	}
}

// CacheSize is one type's sample of xds_relay_cache_resources and
// xds_relay_cache_bytes: what the caches of every scope hold of it.
type CacheSize struct {
	TypeURL          string
	Resources, Bytes int
}

// CollectCache registers xds_relay_cache_resources and xds_relay_cache_bytes,
// whose samples f returns at each scrape (by type URL; samples of one type
// label are added up). Computed from what the cache holds, they can never
// drift from it. f must be safe for concurrent use.
func (m *Metrics) CollectCache(f func() []CacheSize) {
	m.Registry.MustRegister(cacheSizes(f))
}

var (
	cacheResourcesDesc = prometheus.NewDesc(namespace+"_cache_resources",
		"Resource variants held in the cache, watched or not.", []string{"type_url"}, nil)
	cacheBytesDesc = prometheus.NewDesc(namespace+"_cache_bytes",
		"Serialized bytes of the resource variants held in the cache.", []string{"type_url"}, nil)
)

// cacheSizes collects the cache gauges from a function.
type cacheSizes func() []CacheSize

func (cacheSizes) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheResourcesDesc
	ch <- cacheBytesDesc
}

func (f cacheSizes) Collect(ch chan<- prometheus.Metric) {
	byType := make(map[string]CacheSize)
	for _, s := range f() {
		l := TypeLabel(s.TypeURL)
		sum := byType[l]
		sum.Resources += s.Resources
		sum.Bytes += s.Bytes
		byType[l] = sum
	}
	for l, s := range byType {
		ch <- prometheus.MustNewConstMetric(cacheResourcesDesc, prometheus.GaugeValue, float64(s.Resources), l)
		ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(s.Bytes), l)
	}
}

// CollectReadiness registers xds_relay_ready (1 while /readyz answers 200)
// and xds_relay_upstream_synced (1 once an upstream stream was established
// since the start), read at each scrape. The functions must be safe for
// concurrent use.
func (m *Metrics) CollectReadiness(ready, synced func() bool) {
	f := factory{m.Registry}
	f.gaugeFunc("ready", "1 while the relay is ready for clients (GET /readyz answers 200), else 0.", ready)
	f.gaugeFunc("upstream_synced",
		"1 once the relay has established a stream to an upstream server since it started, else 0 (never connected).", synced)
}

// CollectConnections registers xds_relay_downstream_connections, whose
// value open returns at each scrape (counted where the connections are
// tracked: a stats handler would cost an event per message). open must be
// safe for concurrent use.
func (m *Metrics) CollectConnections(open func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "downstream_connections",
		Help: "Open downstream gRPC connections (transports), each of which may carry many streams.",
	}, func() float64 { return float64(open()) }))
}

// New creates every metric on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := factory{reg}
	m := &Metrics{Registry: reg}
	m.createDownstream(f)
	m.createUpstream(f)
	m.createCache(f)
	m.createGateway(f)
	m.createLRS(f)
	m.createWarmFiles(f)
	m.BuildInfo = f.gaugeVec("build_info",
		"Always 1; the labels say which build of the relay runs.",
		"version", "goversion")
	m.initLabels()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// createDownstream creates the metrics of the downstream clients.
func (m *Metrics) createDownstream(f factory) {
	m.DownstreamClients = f.gaugeVec("downstream_clients",
		"Open downstream client streams, each once whatever types it carries (an ADS stream is one), by protocol.",
		"protocol")
	m.DownstreamStreams = f.gaugeVec("downstream_streams",
		"Open downstream xDS streams, by requested type URL and protocol (an ADS stream counts once per type it requested).",
		"type_url", "protocol")
	m.StreamsWaiting = f.gauge("downstream_streams_waiting",
		"Streams with changes to send whose client has not read what it was sent (32 KiB unacknowledged): they send nothing more, and their changes coalesce, until it reads. A client that stopped reading (a hung process, a half-open connection) stays here until keepalive closes it.")
	m.Responses = f.counterVec("responses_total",
		"Discovery responses sent to downstream clients.",
		"type_url", "protocol")
	m.ResponseBytes = f.counterVec("response_bytes_total",
		"Bytes of serialized discovery responses sent to downstream clients.",
		"type_url", "protocol")
	m.ACKs = f.counterVec("acks_total",
		"Requests from downstream clients that acknowledge (accept) a response.",
		"type_url", "protocol")
	m.NACKs = f.counterVec("nacks_total",
		"Requests from downstream clients that reject a response (error_detail set).",
		"type_url", "protocol")
	m.StaleNonces = f.counterVec("stale_nonces_total",
		"Downstream requests whose response_nonce is not the latest one sent on their stream for their type.",
		"protocol")
	m.RejectedRequests = f.counterVec("rejected_requests_total",
		"Downstream requests or streams refused by the relay, by reason.",
		"reason")
	m.AdmissionRejections = f.counter("admission_rejections_total",
		"New downstream streams refused by the new-stream rate limit (RESOURCE_EXHAUSTED; clients retry).")
}

// createUpstream creates the metrics of the upstream control planes.
func (m *Metrics) createUpstream(f factory) {
	m.UpstreamResponses = f.counterVec("upstream_responses_total",
		"Discovery responses received from upstream servers, by whether the relay accepted (ack) or rejected (nack) them.",
		"authority", "type_url", "result")
	m.UpstreamLastUpdate = f.gaugeVec("upstream_last_update_timestamp_seconds",
		"Unix time of the last update accepted from the authority's upstream; time() minus it is how stale the served data may be.",
		"authority")
	m.UpstreamRequests = f.counterVec("upstream_requests_total",
		"Subscription changes sent to an upstream (op: subscribe, unsubscribe): the union of the fleet's interest, not one per client.",
		"authority", "op")
	m.UpstreamReconnects = f.counterVec("upstream_reconnects_total",
		"Times the ADS stream to an upstream server was re-established after a failure.",
		"authority", "server")
	m.UpstreamResyncs = f.counterVec("upstream_resyncs_total",
		"New ADS streams started on a live upstream connection to ask the server for its word (reason: does_not_exist, wildcard, rejected).",
		"authority", "reason")
	m.UpstreamApplyPanics = f.counterVec("upstream_apply_panics_total",
		"Upstream updates whose application panicked (a relay bug, logged with its stack): each response was NACKed and the stream kept working.",
		"authority", "type_url")
}

// createCache creates the metrics of the cache and of the propagation of
// updates through it.
func (m *Metrics) createCache(f factory) {
	m.CacheLookups = f.counterVec("cache_lookups_total",
		"Names newly watched by a stream, by whether the cache already held them (hit) or not (miss).",
		"type_url", "result")
	m.RolloutsStarted = f.counter("rollouts_started_total",
		"Guarded rollouts started: a changed resource went to a canary cohort first.")
	m.Rollouts = f.counterVec("rollouts_total",
		"Guarded rollouts resolved: released to everyone (unjudged: after the hold, no canary having ACKed or NACKed), or halted (the others keep the last accepted version).",
		"type_url", "result")
	m.CacheEvictions = f.counter("cache_evictions_total",
		"Unwatched resource variants dropped from the cache by the max_unreferenced bound.")
	m.EvictionsRefused = f.counterVec("cache_evictions_refused_total",
		"Resources the max_unreferenced bound pushed out of the cache while a client still watched them: kept (nothing watched is evicted). Should stay 0.",
		"type_url")
	m.RemovalsHeld = f.counterVec("removals_held_total",
		"Times a stream held back telling its client that a resource is gone (a SotW LDS/CDS response that would omit it, a Delta removal), because the cache does not know it is gone (unknown), is not confirmed by a live upstream (stale), or the client still references it (referenced).",
		"type_url", "reason")
	m.TP2Ambiguous = f.counter("tp2_ambiguous_matches_total",
		"Subscriptions whose TP2 parameters matched several variants of a resource (the most specific was sent).")

	m.Propagation = f.histogram("propagation_seconds",
		"Seconds from the receipt of an upstream response to a downstream client's ACK of the update it carries.",
		// 1ms doubling to ~33s: clients give up on a resource after 15-30s.
		prometheus.ExponentialBuckets(0.001, 2, 16))
}

// createGateway creates the metrics of gateway.control.v1.
func (m *Metrics) createGateway(f factory) {
	m.GatewayGroups = f.gaugeVec("gateway_groups",
		"gateway.control.v1 snapshot groups (one upstream stream each), by protocol.", "protocol")
	m.GatewayUpstreamConnected = f.gaugeVec("gateway_upstream_connected",
		"gateway.control.v1 groups whose upstream stream is up and answered, by protocol.", "protocol")
	m.GatewayUpstreamResponses = f.counterVec("gateway_upstream_responses_total",
		"gateway.control.v1 responses from upstream, by whether the relay accepted (ack) or rejected (nack) them.",
		"protocol", "result")
	m.GatewayDataplanes = f.gaugeVec("gateway_dataplanes",
		"Data planes by the version and readiness of their latest status report.", "version", "ready")
	m.GatewayReports = f.counterVec("gateway_reports_total",
		"Status reports: received, forwarded upstream, failed after the retries, dropped while too many were pending.",
		"result")
}

// createLRS creates the metrics of load reporting.
func (m *Metrics) createLRS(f factory) {
	m.LRSClientStreams = f.gauge("lrs_client_streams",
		"Open client load reporting (LRS StreamLoadStats) streams.")
	m.LRSReports = f.counterVec("lrs_reports_total",
		"Load reports: received from clients, sent upstream (aggregated), unforwarded (aggregated, and dropped because no upstream takes them: unimplemented or none).",
		"result")
	m.LRSStatsDropped = f.counterVec("lrs_stats_dropped_total",
		"Entries of client load reports (clusters, localities, endpoints, metrics) not aggregated: limit (beyond the bound of keys), invalid (a non-finite value), denied (a cluster the client may not subscribe to).",
		"reason")
}

// createWarmFiles creates the metrics of the warm-restart files.
func (m *Metrics) createWarmFiles(f factory) {
	m.WarmFileWrites = f.counterVec("warm_file_writes_total",
		"Rounds of the warm-restart file writer (file: cache, or gateway for <persist_path>.gateway): written (ok), failed (error: the file keeps its last content), or nothing changed since the last write (unchanged).",
		"file", "result")
	m.WarmFileBytes = f.gaugeVec("warm_file_bytes",
		"Size in bytes of the warm-restart file last written (file: cache, gateway); a write needs twice this on the volume.",
		"file")
}

// wellKnownTypes are the type_url label values TypeLabel keeps.
var wellKnownTypes = []string{keying.ListenerType, keying.RouteType, keying.ScopedRouteType, keying.VirtualHostType,
	keying.ClusterType, keying.EndpointType, keying.SecretType, keying.RuntimeType, keying.ExtensionConfigType}

// RejectReasons are the reason label values of xds_relay_rejected_requests_total.
var RejectReasons = []string{"missing_type_url", "wrong_type_url", "invalid_type_url", "malformed_name",
	"permission_denied", "node", "too_many_names", "too_many_subscriptions", "initial_resource_versions",
	"malformed_json", "unsupported_locators", "message_too_large", "too_many_polls", "shutting_down", "draining", "refused",
	"internal", "unencodable"}

// initLabels creates the known label sets of the counters that count rare
// events at zero, so that increase() sees their first event (a series that
// appears with the value 1 has no increase).
func (m *Metrics) initLabels() {
	for _, r := range RejectReasons {
		m.RejectedRequests.WithLabelValues(r)
	}
	for _, t := range append(wellKnownTypes, OtherType) {
		for _, r := range []string{"released", "unjudged", "halted"} {
			m.Rollouts.WithLabelValues(t, r)
		}
		for _, r := range []string{"unknown", "stale", "referenced"} {
			m.RemovalsHeld.WithLabelValues(t, r)
		}
		m.EvictionsRefused.WithLabelValues(t)
	}
	for _, p := range []string{"gateway-sotw", "gateway-delta"} {
		for _, r := range []string{"ack", "nack"} {
			m.GatewayUpstreamResponses.WithLabelValues(p, r)
		}
	}
	for _, r := range []string{"received", "forwarded", "failed", "dropped"} {
		m.GatewayReports.WithLabelValues(r)
	}
	for _, r := range []string{LRSReceived, LRSSent, LRSUnforwarded} {
		m.LRSReports.WithLabelValues(r)
	}
	for _, r := range LRSDropReasons {
		m.LRSStatsDropped.WithLabelValues(r)
	}
	for _, f := range []string{WarmFileCache, WarmFileGateway} {
		for _, r := range []string{"ok", "error", "unchanged"} {
			m.WarmFileWrites.WithLabelValues(f, r)
		}
		m.WarmFileBytes.WithLabelValues(f)
	}
}

// The file label values of the warm-restart file metrics.
const (
	WarmFileCache   = "cache"   // cache.persist_path
	WarmFileGateway = "gateway" // <cache.persist_path>.gateway
)

// WarmFileWritten counts one round of the warm-restart file writer of file:
// bytes written, nothing changed, or err.
func (m *Metrics) WarmFileWritten(file string, bytes int, unchanged bool, err error) {
	switch {
	case err != nil:
		m.WarmFileWrites.WithLabelValues(file, "error").Inc()
	case unchanged:
		m.WarmFileWrites.WithLabelValues(file, "unchanged").Inc()
	default:
		m.WarmFileWrites.WithLabelValues(file, "ok").Inc()
		m.WarmFileBytes.WithLabelValues(file).Set(float64(bytes))
	}
}

// The result label values of xds_relay_lrs_reports_total.
const (
	LRSReceived    = "received"    // a client's report
	LRSSent        = "sent"        // an aggregated report sent upstream
	LRSUnforwarded = "unforwarded" // an aggregated report no upstream took
)

// LRSDropReasons are the reason label values of
// xds_relay_lrs_stats_dropped_total (package lrs's Drop* constants).
var LRSDropReasons = []string{"limit", "invalid", "denied"}

// InitUpstream creates an upstream's counters at zero, for each of its
// servers and resync reasons: the first reconnect or resync is then an
// increase.
func (m *Metrics) InitUpstream(authority string, servers, resyncReasons []string) {
	for _, s := range servers {
		m.UpstreamReconnects.WithLabelValues(authority, s)
	}
	for _, r := range resyncReasons {
		m.UpstreamResyncs.WithLabelValues(authority, r)
	}
}

// TypeLabel returns the type_url label value for typeURL: the URL itself for
// the well-known xDS types, OtherType for anything else, so that label
// cardinality stays bounded whatever clients send.
func TypeLabel(typeURL string) string {
	switch typeURL {
	case keying.ListenerType, keying.RouteType, keying.ScopedRouteType, keying.VirtualHostType,
		keying.ClusterType, keying.EndpointType, keying.SecretType, keying.RuntimeType,
		keying.ExtensionConfigType:
		return typeURL
	default:
		return OtherType
	}
}

// factory creates collectors named xds_relay_* and registers them on reg.
type factory struct{ reg *prometheus.Registry }

const namespace = "xds_relay"

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeFunc(name, help string, v func() bool) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help},
		func() float64 {
			if v() {
				return 1
			}
			return 0
		}))
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: name, Help: help, Buckets: buckets,
	})
	f.reg.MustRegister(h)
	return h
}
