package admin

import (
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/xds-relay/xds-relay/upstream"
)

// What the relay serves its clients from: the status page's headline.
const (
	// ServingReady: ready, synced with an upstream, and every authority's
	// upstream in use is connected to the first server of its list.
	ServingReady = "ready"
	// ServingWarmCache: ready from the warm-restart file, and no upstream
	// has spoken xDS to the relay since it started.
	ServingWarmCache = "warm_cache"
	// ServingCache: ready, but the upstream of some authority is not
	// connected (connecting, or in backoff): its clients get the cache as it
	// was when the upstream was last heard.
	ServingCache = "cache"
	// ServingFallback: ready, but some authority is on a server after the
	// first of its list (xds_relay_upstream_fallback): the control plane
	// may be down behind it.
	ServingFallback = "fallback"
	// ServingNotReady: /readyz answers 503.
	ServingNotReady = "not_ready"
)

// syncedFamily is xds_relay_upstream_synced.
const (
	syncedFamily   = "xds_relay_upstream_synced"
	fallbackFamily = "xds_relay_upstream_fallback"
)

// ServingOverview is the relay's state in one word and one sentence. A
// relay that is ready but not on its control plane says so in amber
// ("warn"), never "ready" in green.
type ServingOverview struct {
	// State is one of the Serving* constants, the worst that applies in
	// the order not_ready, warm_cache, cache, fallback, ready.
	State string `json:"state"`
	// Class is the page's colour for State: "ok" (green) for ready, "warn"
	// (amber) for warm_cache, cache and fallback, "bad" (red) for not_ready.
	Class string `json:"class"`
	// Headline says it in words, e.g. "serving the warm-restart cache;
	// upstream not answered since start".
	Headline string `json:"headline"`
	// Reason is the body of /readyz.
	Reason string `json:"reason"`
	// Synced is xds_relay_upstream_synced: an upstream has spoken xDS to
	// the relay since it started.
	Synced bool `json:"synced"`
	// Down lists the authorities ("" is the default servers) whose current
	// upstream server is not connected (connecting or backoff), sorted.
	Down []string `json:"down"`
	// OnFallback lists the authorities on a fallback server, sorted.
	OnFallback []string `json:"on_fallback"`
}

// servingOf decides the headline from the readiness, the upstream rows and
// the synced and fallback gauges. Without a synced gauge (a Source that
// does not export it) a ready relay counts as synced.
func servingOf(ready bool, reason string, ups []UpstreamOverview, fams map[string]*dto.MetricFamily) ServingOverview {
	s := ServingOverview{Reason: reason, Synced: ready, Down: []string{}, OnFallback: []string{}}
	if f := fams[syncedFamily]; len(f.GetMetric()) > 0 {
		s.Synced = f.GetMetric()[0].GetGauge().GetValue() > 0
	}
	fallback := byLabel(fams[fallbackFamily], "authority")
	for _, u := range ups {
		if !u.Current {
			continue
		}
		if (u.State == upstream.StateConnecting || u.State == upstream.StateBackoff) && !slices.Contains(s.Down, u.Authority) {
			s.Down = append(s.Down, u.Authority)
		}
		if (u.Fallback || fallback[u.Authority] > 0) && !slices.Contains(s.OnFallback, u.Authority) {
			s.OnFallback = append(s.OnFallback, u.Authority)
		}
	}
	slices.Sort(s.Down)
	slices.Sort(s.OnFallback)
	switch {
	case !ready:
		s.State, s.Class, s.Headline = ServingNotReady, "bad", "not ready"
	case !s.Synced:
		s.State, s.Class = ServingWarmCache, "warn"
		s.Headline = "serving the warm-restart cache; upstream not answered since start"
	case len(s.Down) > 0:
		s.State, s.Class = ServingCache, "warn"
		s.Headline = "serving the cache; upstream not connected for " + authorities(s.Down)
	case len(s.OnFallback) > 0:
		s.State, s.Class = ServingFallback, "warn"
		s.Headline = "serving from a fallback server for " + authorities(s.OnFallback) +
			": the first server of the list is unreachable"
	default:
		s.State, s.Class, s.Headline = ServingReady, "ok", "ready"
	}
	return s
}

// authorities names a list of authorities for a headline.
func authorities(as []string) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = authorityName(a)
	}
	return strings.Join(names, ", ")
}

// authorityName is how the page names an authority: "(default)" for the
// default servers.
func authorityName(a string) string {
	if a == "" {
		return "(default)"
	}
	return a
}

// byLabel sums a family's samples by the value of one label.
func byLabel(f *dto.MetricFamily, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		var k string
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				k = l.GetValue()
			}
		}
		out[k] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return out
}
