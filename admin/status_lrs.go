package admin

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/lrs"
)

// LRSOverview is load reporting at a glance: the client streams, the
// clusters of the interval in flight, the reports counted since start and
// each upstream LRS stream.
type LRSOverview struct {
	// ClientStreams counts the open client StreamLoadStats.
	ClientStreams int `json:"client_streams"`
	// Clusters counts the distinct clusters reported since the last upstream
	// report (the interval in flight), over every upstream.
	Clusters int `json:"clusters"`
	// Reports counts xds_relay_lrs_reports_total by result: "received"
	// (client reports), "sent" (aggregates sent upstream), "unforwarded"
	// (aggregates no upstream took).
	Reports map[string]float64 `json:"reports"`
	// StatsDropped is xds_relay_lrs_stats_dropped_total, reasons summed.
	StatsDropped float64 `json:"stats_dropped"`
	// Upstreams has one entry per upstream LRS stream (authority, node
	// group): its server, state and last report flushed.
	Upstreams []lrs.UpstreamStatus `json:"upstreams"`
}

// Metric families the LRS overview reads.
const (
	lrsReportsFamily = "xds_relay_lrs_reports_total"
	lrsDroppedFamily = "xds_relay_lrs_stats_dropped_total"
)

// lrsOverview joins the relay's LRS status with the LRS counters.
func lrsOverview(st lrs.Status, fams map[string]*dto.MetricFamily) LRSOverview {
	o := LRSOverview{ClientStreams: st.ClientStreams, Clusters: st.Clusters, Upstreams: nonNil(st.Upstreams),
		Reports:      map[string]float64{metrics.LRSReceived: 0, metrics.LRSSent: 0, metrics.LRSUnforwarded: 0},
		StatsDropped: sumFamily(fams[lrsDroppedFamily])}
	for _, m := range fams[lrsReportsFamily].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" {
				o.Reports[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return o
}

// lastReport renders when an upstream's last report was sent and the time
// it covered, "never" before the first.
func lastReport(u lrs.UpstreamStatus) string {
	if u.LastReport.IsZero() {
		return "never"
	}
	return u.LastReport.UTC().Format(time.RFC3339) + " (covered " + humanSeconds(u.LastInterval.Seconds()) + ")"
}
