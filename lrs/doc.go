// Package lrs serves load reporting (envoy.service.load_stats.v3
// LoadReportingService/StreamLoadStats, gRFC A27) to the fleet behind the
// relay and forwards the sum of its clients' reports upstream.
//
// A client stream is answered with the upstream's wishes as the relay last
// received them — clusters or send_all_clusters, load_reporting_interval,
// report_endpoint_granularity — and again at each change. Its first answer
// waits for the upstream's (at most Options.FirstAnswerWait: grpc-go keeps
// the first answer for the stream's life); when the upstream has not
// answered by then, the relay answers with its own default:
// send_all_clusters, DefaultInterval, no endpoint granularity.
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
// The load goes to a destination per (authority, node group): the servers
// of the cluster's xdstp authority when that authority has servers of its
// own (gRFC A47), else the default servers; and the client's node group
// under keying.group_by (Options.Group), presenting the group's node, else
// the relay's node. Each destination has its aggregate and one forwarder
// keeping one StreamLoadStats to the server the relay's xDS stream for it
// is on now (Options.Current; it follows fallback), which sends the
// aggregate once per upstream interval (an interval with no load is
// skipped); load_report_interval is the time the aggregate covers. A
// relay whose clients do not report opens no upstream stream: the default
// servers' forwarder (of a node group) starts with the first client stream
// (of that group), an authority's with the first report that goes there; destinations are bounded (1000; the stats beyond are
// dropped, counted) and kept until Close. Clients are told the destinations' wishes
// merged: every cluster one asks for (send_all_clusters when one does, or
// has not answered yet), the shortest interval, endpoint granularity when
// one asks for it; each destination forwards only the clusters it asked
// for.
//
// While no upstream stream is up the aggregate accumulates and goes with
// the first report on return; a report whose stream breaks after it was
// sent may be lost (at most one interval). Close flushes the interval in
// flight on each upstream stream that is up, half-closes it and waits for
// the upstream to end it, at most Options.FlushTimeout; what is left then
// (no stream up, or the flush failed) is counted unforwarded. Status tells
// the operator's views what each upstream stream is doing. An upstream that answers UNIMPLEMENTED is logged
// once and asked again after Options.RetryUnimplemented; meanwhile the
// aggregate is dropped each interval and counted
// (xds_relay_lrs_reports_total{result="unforwarded"}).
//
// # Concurrency
//
// Server methods are safe for concurrent use. A client stream's reports
// are read on its handler goroutine; a small goroutine per stream sends it
// the settings (they change rarely). Server.mu guards the settings and the
// client streams; each Aggregator has one mutex of its own, never held with
// Server.mu; neither is held for I/O. Each forwarder's run goroutine owns
// its upstream stream and is stopped and waited for by Close.
package lrs
