// Package lrs serves load reporting (envoy.service.load_stats.v3
// LoadReportingService/StreamLoadStats, gRFC A27) to the fleet behind the
// relay and forwards the sum of its clients' reports upstream.
//
// A client stream is answered at once with the upstream's wishes as the
// relay last received them — clusters or send_all_clusters,
// load_reporting_interval, report_endpoint_granularity — and again at each
// change. Before the upstream has answered, the relay answers with its own
// default: send_all_clusters, DefaultInterval, no endpoint granularity.
//
// Every client report is summed into one Aggregator, per (cluster,
// cluster_service_name, locality) and, when the upstream asks for endpoint
// granularity, per endpoint address. A report's counters are deltas since
// the client's previous report, so they are summed;
// total_requests_in_progress and total_active_connections are each
// connected client's latest value, summed (a client whose stream ended
// contributes nothing further). Sums saturate; the entries, and the named
// metrics and drop categories of each, are bounded; what is not aggregated
// is counted in xds_relay_lrs_stats_dropped_total.
//
// One forwarder keeps one StreamLoadStats to the default server the relay's
// xDS stream is on now (Options.Current), presenting the relay's node, and
// sends the aggregate once per upstream interval (an interval with no load
// is skipped); load_report_interval is the time the aggregate covers. While
// no upstream stream is up the aggregate accumulates and goes with the
// first report on return; a report whose stream breaks after it was sent
// may be lost (at most one interval). An upstream that answers
// UNIMPLEMENTED is logged once and asked again after
// Options.RetryUnimplemented; meanwhile the aggregate is dropped each
// interval and counted (xds_relay_lrs_reports_total{result="unforwarded"}).
//
// Not yet: the load of clusters named xdstp://AUTHORITY/... goes to the
// default servers, not to the authority's, and keying.group_by node groups
// share one upstream stream presenting the relay's own node.
//
// # Concurrency
//
// Server methods are safe for concurrent use. A client stream's reports
// are read on its handler goroutine; a small goroutine per stream sends it
// the settings (they change rarely). The Aggregator has one mutex, held for
// no I/O. The forwarder's run goroutine owns the upstream stream and is
// stopped and waited for by Close.
package lrs
