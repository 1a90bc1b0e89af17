package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The lrs run (issue 24): the relay holding N Envoy-like clients, first
// without load reports (the baseline), then with each client also reporting
// load for the clusters it holds (xds-loadgen --lrs) at the interval
// xds-democp asks for (--lrs-interval); the relay sums the reports and
// sends them to xds-democp. Each phase measures the processes over a fixed
// window once the clients synced (and, reporting, once every client's LRS
// stream is up): the relay's CPU and memory, and its LRS throughput from
// /metrics. The reporting phase never goes quiet, so its window is a rate,
// not a change.

// lrsPhase is one measured window. Durations are in nanoseconds in JSON.
type lrsPhase struct {
	// Reporting is true when the clients report load.
	Reporting bool          `json:"reporting"`
	Window    time.Duration `json:"window"`
	// CPU over the window: the relay, xds-loadgen and democp.
	RelayCPU   time.Duration `json:"relay_cpu"`
	LoadgenCPU time.Duration `json:"loadgen_cpu"`
	DemocpCPU  time.Duration `json:"democp_cpu"`
	// The relay's memory at the end of the window.
	RelayRSS        uint64  `json:"relay_rss"`
	RelayHeap       float64 `json:"relay_heap"` // go_memstats_heap_inuse_bytes
	RelayGoroutines float64 `json:"relay_goroutines"`
	// LRSStreams is xds_relay_lrs_client_streams at the end of the window.
	LRSStreams float64 `json:"lrs_streams"`
	// Over the window, from xds_relay_lrs_reports_total and
	// xds_relay_lrs_stats_dropped_total: client reports read, aggregates
	// sent upstream, aggregates no upstream took, stats dropped.
	ReportsIn    float64 `json:"reports_in"`
	ReportsOut   float64 `json:"reports_out"`
	Unforwarded  float64 `json:"unforwarded"`
	StatsDropped float64 `json:"stats_dropped"`
}

// lrsResult is what the lrs run measured.
type lrsResult struct {
	Clients  int           `json:"clients"`
	Interval time.Duration `json:"interval"`
	// Phases are the baseline (no reports) and the reporting phase, in
	// that order (a failed phase is missing).
	Phases []lrsPhase `json:"phases"`
}

// runLRS runs the lrs shape: clients Envoy-like clients through one relay,
// without and then with load reports every interval, each measured over
// window.
func runLRS(ctx context.Context, e env, clients int, interval, window time.Duration) (*lrsResult, error) {
	res := &lrsResult{Clients: clients, Interval: interval}
	srv, err := startServers(ctx, e, "lrs", true, modeEnvoy, "--lrs-interval", interval.String())
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	for _, reporting := range []bool{false, true} {
		p, err := lrsPhaseRun(ctx, e, srv, clients, interval, window, reporting)
		if err != nil {
			return res, err
		}
		res.Phases = append(res.Phases, *p)
	}
	return res, nil
}

// lrsPhaseRun starts the clients, waits for them (and their LRS streams),
// measures one window and stops them.
func lrsPhaseRun(ctx context.Context, e env, srv *servers, clients int, interval, window time.Duration,
	reporting bool) (*lrsPhase, error) {
	name, extra := "lrs-baseline", []string(nil)
	if reporting {
		name, extra = "lrs-reporting", []string{"--lrs"}
	}
	lg, err := startClients(e, name+"-loadgen", srv.target(), clients, 1, modeEnvoy, "sotw", extra...)
	if err != nil {
		return nil, err
	}
	defer lg.stopQuietly()
	e.logf("%s: %d clients connecting to %s", name, clients, srv.target())
	if err := waitSynced(ctx, e, name, lg, clients); err != nil {
		return nil, err
	}
	pids := []int{srv.relay.c.pid(), lg.c.pid(), srv.democp.pid()}
	if reporting {
		if err := waitLRSStreams(ctx, e, srv.relay, clients); err != nil {
			return nil, err
		}
		// Two intervals: every client has sent a report or two.
		if err := pause(ctx, 2*interval); err != nil {
			return nil, err
		}
	} else if _, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second); err != nil {
		return nil, err
	}
	p := &lrsPhase{Reporting: reporting, Window: window}
	s0, err := sampleAll(pids)
	if err != nil {
		return nil, err
	}
	m0, err := srv.relay.metrics(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("%s: measuring %s", name, window)
	if err := pause(ctx, window); err != nil {
		return nil, err
	}
	s1, err := sampleAll(pids)
	if err != nil {
		return nil, err
	}
	m1, err := srv.relay.metrics(ctx)
	if err != nil {
		return nil, err
	}
	p.RelayCPU, p.LoadgenCPU, p.DemocpCPU = s1[0].CPU-s0[0].CPU, s1[1].CPU-s0[1].CPU, s1[2].CPU-s0[2].CPU
	p.RelayRSS = s1[0].RSS
	p.RelayHeap, _ = m1.sum("go_memstats_heap_inuse_bytes", nil)
	p.RelayGoroutines, _ = m1.sum("go_goroutines", nil)
	p.LRSStreams, _ = m1.sum("xds_relay_lrs_client_streams", nil)
	delta := func(name string, match map[string]string) float64 {
		a, _ := m0.sum(name, match)
		b, _ := m1.sum(name, match)
		return b - a
	}
	p.ReportsIn = delta("xds_relay_lrs_reports_total", map[string]string{"result": "received"})
	p.ReportsOut = delta("xds_relay_lrs_reports_total", map[string]string{"result": "sent"})
	p.Unforwarded = delta("xds_relay_lrs_reports_total", map[string]string{"result": "unforwarded"})
	p.StatsDropped = delta("xds_relay_lrs_stats_dropped_total", nil)
	e.logf("%s: relay CPU %s over %s, %.0f client reports", name, fmtDur(p.RelayCPU), fmtDur(window), p.ReportsIn)
	return p, nil
}

// waitLRSStreams waits until the relay has n client LRS streams.
func waitLRSStreams(ctx context.Context, e env, r *relayProc, n int) error {
	wctx, cancel := context.WithTimeout(ctx, e.syncTimeout)
	defer cancel()
	for {
		m, err := r.metrics(wctx)
		if err != nil {
			return err
		}
		if got, _ := m.sum("xds_relay_lrs_client_streams", nil); got >= float64(n) {
			return nil
		}
		if err := pause(wctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("bench: lrs: waiting for %d client LRS streams: %w", n, err)
		}
	}
}

// writeLRS prints the lrs run: the relay's cost of its clients' load
// reports beside the same relay and clients without them.
func (s *suiteResult) writeLRS(b *strings.Builder) {
	l := s.LRS
	if l == nil || len(l.Phases) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Load reporting (issue 24): %s clients reporting every %s through one relay\n\n",
		fmtCount(l.Clients), fmtDur(l.Interval))
	b.WriteString("| phase | window | relay CPU (cores) | relay RSS (Go heap in use) | goroutines | LRS streams | " +
		"client reports/s | upstream reports/s | unforwarded | stats dropped | democp CPU | loadgen CPU |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, p := range l.Phases {
		name := "baseline: xDS only"
		if p.Reporting {
			name = "reporting"
		}
		secs := p.Window.Seconds()
		fmt.Fprintf(b, "| %s | %s | %s (%.3f) | %s (%s) | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %s | %s |\n",
			name, fmtDur(p.Window), fmtDur(p.RelayCPU), p.RelayCPU.Seconds()/secs, fmtBytes(float64(p.RelayRSS)),
			fmtBytes(p.RelayHeap), p.RelayGoroutines, p.LRSStreams, p.ReportsIn/secs, p.ReportsOut/secs, p.Unforwarded,
			p.StatsDropped, fmtDur(p.DemocpCPU), fmtDur(p.LoadgenCPU))
	}
	if len(l.Phases) == 2 && l.Phases[1].ReportsIn > 0 {
		base, rep := l.Phases[0], l.Phases[1]
		perReport := time.Duration(float64(rep.RelayCPU-base.RelayCPU) / rep.ReportsIn)
		fmt.Fprintf(b, "\nThe reports cost the relay %s of CPU per client report (over the baseline) and %s RSS "+
			"(%s per reporting client).\n", fmtDur(perReport), fmtBytes(float64(rep.RelayRSS)-float64(base.RelayRSS)),
			fmtBytes(perClient(float64(rep.RelayRSS)-float64(base.RelayRSS), l.Clients)))
	}
}
