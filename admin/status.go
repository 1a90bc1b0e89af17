package admin

import (
	_ "embed" // the status page template
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/upstream"
)

// This file is the operator's view of a relay: the status page served at the
// admin "/" (Overview and its HTML rendering), the effective configuration at
// /debug/config (RedactConfig, secrets redacted) and the runtime log level
// at /debug/loglevel.
// Everything here only reads the relay, through DebugCache, DebugClients,
// DebugUpstreams, DebugLRS and the Prometheus registry; it takes no lock of its own.

// MaxOverviewNACKs bounds Overview.NACKs.
const MaxOverviewNACKs = 50

// Overview is the relay's state at a glance: what the status page shows.
type Overview struct {
	Version string `json:"version"`
	Ready   bool   `json:"ready"`
	// Serving is what the relay serves from, in a word and a sentence: the
	// page's headline.
	Serving ServingOverview `json:"serving"`

	Fleet     FleetOverview      `json:"fleet"`
	Upstreams []UpstreamOverview `json:"upstreams"`
	Cache     []CacheTypeSummary `json:"cache"`
	// NACKs are the streams' last NACKs grouped by (type, rejected version,
	// message), the largest groups first, at most MaxOverviewNACKs groups;
	// NACKGroups counts all groups and NACKsTotal the (stream, type) pairs
	// whose last response was rejected.
	NACKs      []NACKGroup `json:"nacks"`
	NACKGroups int         `json:"nack_groups"`
	NACKsTotal int         `json:"nacks_total"`
	// Counters are the relay's counters since start, by metric name (labels
	// summed), e.g. "xds_relay_responses_total".
	Counters    map[string]float64  `json:"counters"`
	Propagation PropagationOverview `json:"propagation"`
	// LRS is load reporting: client streams and the upstream LRS streams.
	LRS LRSOverview `json:"lrs"`
}

// FleetOverview counts the downstream streams.
type FleetOverview struct {
	Streams int `json:"streams"`
	// Connections is xds_relay_downstream_connections: client transports,
	// each carrying one or more streams.
	Connections int `json:"connections"`
	// Nodes counts distinct node ids.
	Nodes int `json:"nodes"`
	// ByProtocol counts streams by "sotw" / "delta".
	ByProtocol map[string]int `json:"by_protocol"`
	// ByService counts streams by "ads" or the per-type service's type URL.
	ByService map[string]int `json:"by_service"`
	// ByType counts, per type URL, the streams that subscribed to it.
	ByType []TypeStreams `json:"by_type"`
}

// TypeStreams is how many streams of each protocol subscribe to one type,
// and how many are in each sync state (xds_relay_fleet_sync_streams):
// Current (latest response ACKed, nothing pending), Behind, NACKing.
type TypeStreams struct {
	Type    string `json:"type"`
	SotW    int    `json:"sotw"`
	Delta   int    `json:"delta"`
	Current int    `json:"current"`
	Behind  int    `json:"behind"`
	NACKing int    `json:"nacking"`
}

// UpstreamOverview is the health of one configured upstream server of one
// authority ("" is the default servers).
type UpstreamOverview struct {
	Authority string `json:"authority"`
	Server    string `json:"server"`
	// Current is true for the server the authority's client uses or tries.
	Current bool `json:"current"`
	// Fallback is true for a current server that is not the first of the
	// list (xds_relay_upstream_fallback): the earlier ones are unreachable.
	Fallback bool `json:"fallback,omitempty"`
	// State is the client's state (upstream.State*) on the current server,
	// "standby" on the others.
	State string `json:"state"`
	// Connected: some stream is established to the server
	// (xds_relay_upstream_connected, summed over its scopes).
	Connected bool `json:"connected"`
	// Reconnects is xds_relay_upstream_reconnects_total for the server.
	Reconnects float64 `json:"reconnects"`
	// LastError is the client's last error, on the current server only.
	LastError string `json:"last_error,omitempty"`
	// Subscribed counts the names the client subscribes to (all types; a
	// wildcard counts as one).
	Subscribed int `json:"subscribed"`
}

// CacheTypeSummary sums the cache's variants of one type.
type CacheTypeSummary struct {
	Type      string `json:"type"`
	Resources int    `json:"resources"`
	// Watched counts the variants with at least one subscriber; the others
	// are kept by the max_unreferenced LRU.
	Watched int `json:"watched"`
	Bytes   int `json:"bytes"`
}

// PropagationOverview is the xds_relay_propagation_seconds histogram.
type PropagationOverview struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	// Buckets are the finite buckets, with the count of each (not
	// cumulative); Overflow counts the observations above the last bound.
	Buckets  []HistogramBucket `json:"buckets"`
	Overflow uint64            `json:"overflow"`
	// P50, P90 and P99 are estimated from the buckets as Prometheus'
	// histogram_quantile does (linear within a bucket); 0 without samples.
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// HistogramBucket is one bucket: observations in (previous bound, UpperBound].
type HistogramBucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"`
}

// Metric family names the overview reads from the registry.
const (
	propagationFamily = "xds_relay_propagation_seconds"
	connectedFamily   = "xds_relay_upstream_connected"
	reconnectsFamily  = "xds_relay_upstream_reconnects_total"
	connectionsFamily = "xds_relay_downstream_connections"
)

// overviewCounters are the counter families summed into Overview.Counters.
var overviewCounters = []string{
	"xds_relay_responses_total",
	"xds_relay_response_bytes_total",
	"xds_relay_acks_total",
	"xds_relay_nacks_total",
	"xds_relay_stale_nonces_total",
	"xds_relay_rejected_requests_total",
	"xds_relay_admission_rejections_total",
	"xds_relay_upstream_responses_total",
	reconnectsFamily,
	"xds_relay_cache_evictions_total",
}

// OverviewOf collects the status page's figures from src's DebugClients,
// DebugUpstreams, DebugCache, DebugLRS and registry. Safe for concurrent use.
func OverviewOf(src Source) Overview {
	got, err := src.Registry().Gather()
	if err != nil {
		src.Logger().Warn("status: gather metrics", zap.Error(err)) // what was gathered is still shown
	}
	fams := make(map[string]*dto.MetricFamily, len(got))
	for _, f := range got {
		fams[f.GetName()] = f
	}
	o := Overview{
		Version:     relay.Version,
		Counters:    make(map[string]float64, len(overviewCounters)),
		Propagation: propagation(fams[propagationFamily]),
	}
	for _, name := range overviewCounters {
		o.Counters[name] = sumFamily(fams[name])
	}
	clients := src.DebugClients("")
	o.Fleet = fleet(clients)
	o.Fleet.Connections = int(sumFamily(fams[connectionsFamily]))
	addSync(o.Fleet.ByType, fams[metrics.SyncFamily])
	o.NACKs, o.NACKsTotal, o.NACKGroups = nackGroups(clients)
	o.Upstreams = upstreamOverview(src.Config(), src.DebugUpstreams(), fams)
	ok, reason := src.Readiness()
	o.Ready, o.Serving = ok, servingOf(ok, reason, o.Upstreams, fams)
	o.Cache = cacheSummary(src.DebugCache(relay.CacheFilter{}))
	o.LRS = lrsOverview(src.DebugLRS(), fams)
	// Lists are [] in JSON, never null.
	o.Fleet.ByType = nonNil(o.Fleet.ByType)
	o.Upstreams, o.Cache, o.NACKs = nonNil(o.Upstreams), nonNil(o.Cache), nonNil(o.NACKs)
	o.Propagation.Buckets = nonNil(o.Propagation.Buckets)
	return o
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func fleet(clients []relay.ClientInfo) FleetOverview {
	f := FleetOverview{
		Streams:    len(clients),
		ByProtocol: map[string]int{},
		ByService:  map[string]int{},
	}
	nodes := map[string]bool{}
	byType := map[string]*TypeStreams{}
	for _, c := range clients {
		nodes[c.NodeID] = true
		f.ByProtocol[c.Protocol]++
		f.ByService[c.Service]++
		for t := range c.Types {
			ts := byType[t]
			if ts == nil {
				ts = &TypeStreams{Type: t}
				byType[t] = ts
			}
			if c.Protocol == "delta" {
				ts.Delta++
			} else {
				ts.SotW++
			}
		}
	}
	f.Nodes = len(nodes)
	for _, ts := range byType {
		f.ByType = append(f.ByType, *ts)
	}
	slices.SortFunc(f.ByType, func(a, b TypeStreams) int { return strings.Compare(a.Type, b.Type) })
	return f
}

// upstreamOverview lists every configured server of every authority client,
// with the client's state on the current one and the per-server metrics.
func upstreamOverview(cfg *config.Config, ups []relay.UpstreamInfo, fams map[string]*dto.MetricFamily) []UpstreamOverview {
	connected := byAuthorityServer(fams[connectedFamily])
	reconnects := byAuthorityServer(fams[reconnectsFamily])
	var out []UpstreamOverview
	for _, u := range ups {
		subscribed := 0
		for _, t := range u.Types {
			subscribed += len(t.Names)
			if t.Wildcard {
				subscribed++
			}
		}
		for i, server := range configuredServers(cfg, u.Authority, u.Server) {
			k := [2]string{u.Authority, server}
			row := UpstreamOverview{Authority: u.Authority, Server: server, State: "standby",
				Connected: connected[k] > 0, Reconnects: reconnects[k]}
			// Before its first attempt a client names no server: the first one is next.
			if server == u.Server || (u.Server == "" && i == 0) {
				row.Current, row.State, row.LastError, row.Subscribed = true, u.State, u.LastError, subscribed
				row.Fallback = i > 0 && u.State != upstream.StateIdle && u.State != upstream.StateBackoff
			}
			out = append(out, row)
		}
	}
	return out
}

// configuredServers is the server list of authority in the config, in order;
// current is added when the config does not list it.
func configuredServers(cfg *config.Config, authority, current string) []string {
	servers := cfg.Upstream.XDSServers
	if a, ok := cfg.Upstream.Authorities[authority]; ok && authority != "" && len(a.XDSServers) > 0 {
		servers = a.XDSServers
	}
	out := make([]string, 0, len(servers)+1)
	for _, s := range servers {
		out = append(out, s.ServerURI)
	}
	if current != "" && !slices.Contains(out, current) {
		out = append(out, current)
	}
	return out
}

func cacheSummary(entries []relay.CacheEntryInfo) []CacheTypeSummary {
	var out []CacheTypeSummary
	for _, e := range entries { // sorted by type
		if len(out) == 0 || out[len(out)-1].Type != e.Type {
			out = append(out, CacheTypeSummary{Type: e.Type})
		}
		s := &out[len(out)-1]
		s.Resources++
		s.Bytes += e.Bytes
		if e.Subscribers > 0 {
			s.Watched++
		}
	}
	return out
}

// addSync fills the sync states of each type from the fleet sync family
// (types without a label of their own share "other" and are left out).
func addSync(types []TypeStreams, f *dto.MetricFamily) {
	byLabel := map[[2]string]int{}
	for _, m := range f.GetMetric() {
		var typ, state string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "type_url":
				typ = l.GetValue()
			case "state":
				state = l.GetValue()
			}
		}
		byLabel[[2]string{typ, state}] += int(m.GetGauge().GetValue())
	}
	for i := range types {
		if l := metrics.TypeLabel(types[i].Type); l != metrics.OtherType {
			types[i].Current = byLabel[[2]string{l, "current"}]
			types[i].Behind = byLabel[[2]string{l, "behind"}]
			types[i].NACKing = byLabel[[2]string{l, "nacking"}]
		}
	}
}

// sumFamily sums the values of a counter or gauge family over its labels.
func sumFamily(f *dto.MetricFamily) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum
}

// byAuthorityServer indexes a family labelled {authority, server} by them.
func byAuthorityServer(f *dto.MetricFamily) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, m := range f.GetMetric() {
		var k [2]string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "authority":
				k[0] = l.GetValue()
			case "server":
				k[1] = l.GetValue()
			}
		}
		out[k] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return out
}

// propagation turns the histogram family into per-bucket counts and quantiles.
func propagation(f *dto.MetricFamily) PropagationOverview {
	var p PropagationOverview
	if len(f.GetMetric()) == 0 {
		return p
	}
	h := f.GetMetric()[0].GetHistogram()
	p.Count, p.Sum = h.GetSampleCount(), h.GetSampleSum()
	var prev uint64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue
		}
		p.Buckets = append(p.Buckets, HistogramBucket{UpperBound: b.GetUpperBound(), Count: b.GetCumulativeCount() - prev})
		prev = b.GetCumulativeCount()
	}
	p.Overflow = p.Count - prev
	p.P50, p.P90, p.P99 = p.Quantile(0.5), p.Quantile(0.9), p.Quantile(0.99)
	return p
}

// Quantile estimates the q-quantile (0 < q < 1) as Prometheus'
// histogram_quantile does: linear interpolation inside the bucket that holds
// it, the first bucket starting at 0, and the highest finite bound when the
// quantile lies above it. It returns 0 without observations.
func (p PropagationOverview) Quantile(q float64) float64 {
	if p.Count == 0 || len(p.Buckets) == 0 {
		return 0
	}
	rank := q * float64(p.Count)
	var cum uint64
	lower := 0.0
	for _, b := range p.Buckets {
		if float64(cum+b.Count) >= rank && b.Count > 0 {
			return lower + (b.UpperBound-lower)*(rank-float64(cum))/float64(b.Count)
		}
		cum += b.Count
		lower = b.UpperBound
	}
	return p.Buckets[len(p.Buckets)-1].UpperBound
}

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"short":     keying.ShortType,
	"bytes":     humanBytes,
	"seconds":   humanSeconds,
	"authority": authorityName,
	"count":     func(n int) string { return thousands(float64(n)) },
	"human":     humanCount,
	"exact":     thousands,
	"share":     share,
	"add3":      func(a, b, c int) int { return a + b + c },
	"float":     func(n uint64) float64 { return float64(n) },
	"syncClass": syncClass,
	// pct is a bucket's share of max as a CSS width, at least 1% when non-empty.
	"pct": func(n, max uint64) float64 {
		if max == 0 || n == 0 {
			return 0
		}
		return math.Max(1, math.Round(1000*float64(n)/float64(max))/10)
	},
	"maxBucket": func(p PropagationOverview) uint64 {
		m := p.Overflow
		for _, b := range p.Buckets {
			m = max(m, b.Count)
		}
		return m
	},
	// counter is a counter for a reader ("12.3k"); exactCounter its exact
	// value ("12,345"), for a title.
	"counter": func(c map[string]float64, name string) string {
		return humanCount(c[name])
	},
	"exactCounter": func(c map[string]float64, name string) string {
		return thousands(c[name])
	},
	"lastReport": lastReport,
}).Parse(statusHTML))

// serveStatus answers the admin "/": the HTML status page for browsers (an
// Accept header with text/html, or ?format=html), the Overview as JSON with
// ?format=json, else the plain-text index of the admin endpoints.
func (s *server) serveStatus(w http.ResponseWriter, req *http.Request) {
	format := req.URL.Query().Get("format")
	switch {
	case format == "json":
		s.writeJSON(w, OverviewOf(s.src))
	case format == "html" || (format == "" && strings.Contains(req.Header.Get("Accept"), "text/html")):
		var b strings.Builder
		if err := statusTemplate.Execute(&b, OverviewOf(s.src)); err != nil {
			s.log.Error("status: render page", zap.Error(err))
			http.Error(w, "relay: status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Self-contained: inline styles only, nothing fetched, no scripts.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		_, _ = w.Write([]byte(b.String()))
	default:
		writeText(w, http.StatusOK, adminIndexText)
	}
}

// humanBytes formats n bytes as "512 B", "9.5 KiB", "1.2 MiB".
func humanBytes(n int) string {
	const unit = 1024
	if n < unit {
		return strconv.Itoa(n) + " B"
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 3 {
		f /= unit
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + [...]string{"KiB", "MiB", "GiB", "TiB"}[i]
}

// humanSeconds formats a duration in seconds with three significant digits:
// "250 µs", "12.3 ms", "1.5 s".
func humanSeconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-3:
		return strconv.FormatFloat(s*1e6, 'g', 3, 64) + " µs"
	case s < 1:
		return strconv.FormatFloat(s*1e3, 'g', 3, 64) + " ms"
	default:
		return strconv.FormatFloat(s, 'g', 3, 64) + " s"
	}
}

// formatFloat formats a metric value: integers without a fraction.
func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// statusRoutes adds the routes of this file to the admin mux.
func (s *server) statusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.serveStatus)
	mux.HandleFunc("GET /debug/config", func(w http.ResponseWriter, _ *http.Request) {
		cfg, err := RedactConfig(s.src.Config())
		if err != nil {
			s.log.Error("admin: effective config", zap.Error(err))
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.writeJSON(w, cfg)
	})
	mux.HandleFunc("GET /debug/loglevel", s.serveLogLevel)
	mux.HandleFunc("PUT /debug/loglevel", s.serveLogLevel)
	mux.HandleFunc("POST /debug/loglevel", s.serveLogLevel)
}
