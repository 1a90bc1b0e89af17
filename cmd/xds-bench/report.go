package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// The targets of the fan-out suite (issue 7). Each compares the relay with
// the measurement named in the target; see docs/BENCHMARKS.md.
const (
	// T1: the last client has the change within this multiple of the TCP limit.
	targetPropVsLimit = 5.0
	// T2: the relay spends at most this fraction of the baseline's CPU per change per client.
	targetCPUVsBaseline = 0.25
	// T3: the relay holds at most this fraction of the baseline's memory per client.
	targetMemVsBaseline = 0.5
	// T4: N clients connecting at once are all synced within this multiple of the baseline's time.
	targetSyncVsBaseline = 1.0
	// T5: RSS of one relay holding the big stream count (100,000 streams by default).
	targetStreamsRSS = 2 << 30
	// T6: Delta bytes per client per change, as a fraction of SotW's.
	targetDeltaVsSotW = 0.05
)

// machine describes where the suite ran.
type machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
	Date      string `json:"date"`
}

// suiteResult is everything one xds-bench invocation measured; a nil run was
// not run, and Errors holds the runs that failed.
type suiteResult struct {
	Machine      machine `json:"machine"`
	Command      string  `json:"command"`
	Clients      int     `json:"clients"`
	Clusters     int     `json:"clusters"`
	PayloadBytes int     `json:"payload_bytes"`
	ClusterBytes int     `json:"cluster_bytes"`

	Limit *limitResult `json:"limit,omitempty"`
	// The gRPC floor (issue 26) with Envoy-like and gRPC-like clients.
	FloorSotW     *runResult `json:"floor_sotw,omitempty"`
	FloorGRPC     *runResult `json:"floor_grpc,omitempty"`
	Baseline      *runResult `json:"baseline,omitempty"`
	Relay         *runResult `json:"relay,omitempty"`
	BaselineDelta *runResult `json:"baseline_delta,omitempty"`
	RelayDelta    *runResult `json:"relay_delta,omitempty"`
	Streams       *runResult `json:"streams,omitempty"`
	Profile       *runResult `json:"profile,omitempty"`
	// The fleet shapes (issue 13).
	BaselineGRPC *runResult    `json:"baseline_grpc,omitempty"`
	RelayGRPC    *runResult    `json:"relay_grpc,omitempty"`
	Latency      *runResult    `json:"latency,omitempty"`
	Stuck        *stuckResult  `json:"stuck,omitempty"`
	Tiered       *tieredResult `json:"tiered,omitempty"`
	// LRS is the load reporting run (issue 24).
	LRS *lrsResult `json:"lrs,omitempty"`
	// ProfileTop is `go tool pprof -top` of the relay's CPU profile during the change.
	ProfileTop string `json:"profile_top,omitempty"`

	// Errors by run name.
	Errors map[string]string `json:"errors,omitempty"`
}

// row is one line of the results table.
type row struct {
	Target, Baseline, Relay, Limit, Ratio, Met string
}

const dash = "—"

// perClient divides a total by n clients.
func perClient(total float64, n int) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return total / float64(n)
}

// propMax returns the time until the last client had the change.
func propMax(r *runResult) (time.Duration, bool) {
	if r == nil || r.Loadgen == nil || r.Loadgen.Propagation.Samples == 0 {
		return 0, false
	}
	return time.Duration(r.Loadgen.Propagation.Max * float64(time.Millisecond)), true
}

// cpuPerClient returns CPU per change per client (of the serving process, or
// with both set, of relay and democp together).
func cpuPerClient(r *runResult, both bool) (time.Duration, bool) {
	if r == nil || !r.Config.Change || r.ChangeWindow == 0 {
		return 0, false
	}
	cpu := r.ServerCPU
	if both {
		cpu += r.DemocpCPU
	}
	return time.Duration(perClient(float64(cpu), r.Config.Clients)), true
}

// rssPerClient returns the serving process's RSS growth per client.
func rssPerClient(r *runResult) (float64, bool) {
	if r == nil || r.ServerRSSAfter == 0 {
		return 0, false
	}
	return perClient(float64(r.ServerRSSAfter)-float64(r.ServerRSSBefore), r.Config.Clients), true
}

// writePerClient returns the serving process's bytes written per client over the change.
func writePerClient(r *runResult) (float64, bool) {
	if r == nil || r.ServerWrite == 0 {
		return 0, false
	}
	return perClient(float64(r.ServerWrite), r.Config.Clients), true
}

// writtenAll returns the time until the serving process had written the change.
func writtenAll(r *runResult) (time.Duration, bool) {
	if r == nil || r.WrittenAll <= 0 {
		return 0, false
	}
	return r.WrittenAll, true
}

// syncAll returns the time until every client synced.
func syncAll(r *runResult) (time.Duration, bool) {
	if r == nil || r.Loadgen == nil || r.Loadgen.TimeToSyncAllMS == nil {
		return 0, false
	}
	return time.Duration(*r.Loadgen.TimeToSyncAllMS * float64(time.Millisecond)), true
}

// ratioCell formats relay/ref and whether it is at most limit.
func ratioCell(relay, ref float64, okRelay, okRef bool, what string, limit float64) (cell, met string) {
	if !okRelay || !okRef || ref <= 0 {
		return dash, dash
	}
	q := relay / ref
	return fmtRatio(q) + " " + what, metCell(q <= limit, fmtRatio(q/limit)+" over")
}

func metCell(ok bool, miss string) string {
	if ok {
		return "yes"
	}
	return "**no** (" + miss + ")"
}

// cellIf formats a known value with f, and an unknown one as a dash.
func cellIf(ok bool, f func() string) string {
	if !ok {
		return dash
	}
	return f()
}

// rows builds the results table: one group of rows per target, in order.
func (s *suiteResult) rows() []row {
	var rows []row
	rows = append(rows, s.propagationRows()...)
	rows = append(rows, s.cpuRows()...)
	rows = append(rows, s.memoryRows()...)
	rows = append(rows, s.connectRows()...)
	rows = append(rows, s.streamsRow())
	rows = append(rows, s.wireRows()...)
	return rows
}

// propagationRows are target 1: the time until the last client has the
// change, and until the serving process has written it to all of them.
func (s *suiteResult) propagationRows() []row {
	n := s.Clients
	bp, okBP := propMax(s.Baseline)
	rp, okRP := propMax(s.Relay)
	bw, okBW := writtenAll(s.Baseline)
	rw, okRW := writtenAll(s.Relay)
	return []row{
		s.vsLimitRow(fmt.Sprintf("1. last of %s SotW clients has a 1-cluster change (≤ %g× limit)", fmtCount(n), targetPropVsLimit),
			bp, rp, okBP, okRP),
		s.vsLimitRow(fmt.Sprintf("1b. serving process has written it to all %s (server side; ≤ %g× limit)", fmtCount(n), targetPropVsLimit),
			bw, rw, okBW, okRW),
	}
}

// vsLimitRow is a row of durations judged against the TCP limit's median,
// with the relay's ratio to the baseline beside it for information.
func (s *suiteResult) vsLimitRow(target string, base, relay time.Duration, okB, okR bool) row {
	r := row{
		Target:   target,
		Baseline: cellIf(okB, func() string { return fmtDur(base) }),
		Relay:    cellIf(okR, func() string { return fmtDur(relay) }),
		Limit:    dash, Ratio: dash, Met: dash,
	}
	if s.Limit != nil {
		r.Limit = fmtDur(s.Limit.Median)
		r.Ratio, r.Met = ratioCell(float64(relay), float64(s.Limit.Median), okR, true, "limit", targetPropVsLimit)
		if okR && okB && base > 0 {
			r.Ratio += ", " + fmtRatio(float64(relay)/float64(base)) + " baseline"
		}
	}
	return r
}

// cpuRows are target 2: CPU per change per client, of the serving process
// and of the relay and democp together, against the baseline.
func (s *suiteResult) cpuRows() []row {
	bc, okB := cpuPerClient(s.Baseline, false)
	rc, okR := cpuPerClient(s.Relay, false)
	r2 := row{
		Target:   fmt.Sprintf("2. serving process CPU per change per client (≤ %g× baseline)", targetCPUVsBaseline),
		Baseline: cellIf(okB, func() string { return fmtDur(bc) }),
		Relay:    cellIf(okR, func() string { return fmtDur(rc) }),
		Limit:    dash,
	}
	if s.Limit != nil {
		r2.Limit = fmtDur(time.Duration(perClient(float64(s.Limit.WriterCPU), s.Limit.Conns)))
	}
	r2.Ratio, r2.Met = ratioCell(float64(rc), float64(bc), okR, okB, "baseline", targetCPUVsBaseline)
	rcb, okRB := cpuPerClient(s.Relay, true)
	r2b := row{
		Target:   fmt.Sprintf("2b. relay + democp CPU per change per client (≤ %g× baseline)", targetCPUVsBaseline),
		Baseline: r2.Baseline,
		Relay:    cellIf(okRB, func() string { return fmtDur(rcb) }),
		Limit:    r2.Limit,
	}
	r2b.Ratio, r2b.Met = ratioCell(float64(rcb), float64(bc), okRB, okB, "baseline", targetCPUVsBaseline)
	return []row{r2, r2b}
}

// memoryRows are target 3: the serving process's RSS per connected client
// against the baseline, and the relay's Go heap per client when measured.
func (s *suiteResult) memoryRows() []row {
	bm, okB := rssPerClient(s.Baseline)
	rm, okR := rssPerClient(s.Relay)
	r3 := row{
		Target:   fmt.Sprintf("3. serving process RSS per connected client (≤ %g× baseline)", targetMemVsBaseline),
		Baseline: cellIf(okB, func() string { return fmtBytes(bm) }),
		Relay:    cellIf(okR, func() string { return fmtBytes(rm) }),
		Limit:    dash,
	}
	if s.Limit != nil {
		r3.Limit = fmtBytes(perClient(float64(s.Limit.WriterRSSAfter)-float64(s.Limit.WriterRSSBefore), s.Limit.Conns))
	}
	r3.Ratio, r3.Met = ratioCell(rm, bm, okR, okB, "baseline", targetMemVsBaseline)
	rows := []row{r3}
	if s.Relay != nil && s.Relay.RelayHeapAfter > 0 {
		rows = append(rows, row{
			Target:   "3b. relay Go heap in use per connected client (information)",
			Baseline: dash,
			Relay:    fmtBytes(perClient(s.Relay.RelayHeapAfter-s.Relay.RelayHeapBefore, s.Relay.Config.Clients)),
			Limit:    dash, Ratio: dash, Met: dash,
		})
	}
	return rows
}

// connectRows are target 4: the connection storm, how long until every
// client synced, and how many connections reached the control plane.
func (s *suiteResult) connectRows() []row {
	n := s.Clients
	bs, okB := syncAll(s.Baseline)
	rs, okR := syncAll(s.Relay)
	r4 := row{
		Target:   fmt.Sprintf("4. %s clients connect at once: all synced (≤ %g× baseline)", fmtCount(n), targetSyncVsBaseline),
		Baseline: cellIf(okB, func() string { return fmtDur(bs) }),
		Relay:    cellIf(okR, func() string { return fmtDur(rs) }),
		Limit:    dash,
	}
	if s.Limit != nil {
		r4.Limit = fmtDur(s.Limit.ConnectAll) + " (TCP connect)"
	}
	r4.Ratio, r4.Met = ratioCell(float64(rs), float64(bs), okR, okB, "baseline", targetSyncVsBaseline)
	r4b := row{Target: fmt.Sprintf("4b. connections to the control plane for %s clients (= 1)", fmtCount(n)),
		Baseline: dash, Relay: dash, Limit: "1", Ratio: dash, Met: dash}
	if s.Baseline != nil {
		r4b.Baseline = fmtCount(s.Baseline.DemocpConns)
	}
	if s.Relay != nil {
		r4b.Relay = fmt.Sprintf("%d (upstream_connected %g)", s.Relay.DemocpConns, s.Relay.UpstreamConnected)
		r4b.Met = metCell(s.Relay.DemocpConns == 1 && s.Relay.UpstreamConnected == 1,
			fmt.Sprintf("%d connections", s.Relay.DemocpConns))
	}
	return []row{r4, r4b}
}

// streamsRow is target 5: the RSS of one relay holding many streams, 10 per
// connection, against a fixed budget; every stream must have synced.
func (s *suiteResult) streamsRow() row {
	r5 := row{Target: fmt.Sprintf("5. one relay holding many streams, 10 per connection: RSS (≤ %s)",
		fmtBytes(targetStreamsRSS)), Baseline: "not run", Relay: "skipped (--streams 0)", Limit: dash, Ratio: dash, Met: dash}
	st := s.Streams
	if st == nil {
		return r5
	}
	r5.Target = fmt.Sprintf("5. one relay holding %s streams on %s connections: RSS (≤ %s)",
		fmtCount(st.Config.Clients), fmtCount(st.Config.Clients/max(st.Config.StreamsPerConn, 1)), fmtBytes(targetStreamsRSS))
	r5.Relay = fmt.Sprintf("%s (%s per stream)", fmtBytes(float64(st.ServerRSSAfter)),
		fmtBytes(perClient(float64(st.ServerRSSAfter)-float64(st.ServerRSSBefore), st.Config.Clients)))
	synced := st.Loadgen != nil && st.Loadgen.Failed == 0
	r5.Ratio = fmtRatio(float64(st.ServerRSSAfter)/targetStreamsRSS) + " target"
	r5.Met = metCell(synced && st.ServerRSSAfter <= targetStreamsRSS,
		fmtRatio(float64(st.ServerRSSAfter)/targetStreamsRSS)+" over")
	if !synced {
		r5.Met = "**no** (not all streams synced)"
	}
	return r5
}

// wireRows are target 6: bytes on the wire per client per change, SotW for
// information and Delta against SotW.
func (s *suiteResult) wireRows() []row {
	bw, okBS := writePerClient(s.Baseline)
	rw, okRS := writePerClient(s.Relay)
	r6a := row{
		Target:   "6a. SotW: bytes written per client per change (information)",
		Baseline: cellIf(okBS, func() string { return fmtBytes(bw) }),
		Relay:    cellIf(okRS, func() string { return fmtBytes(rw) }),
		Limit:    fmtBytes(float64(s.PayloadBytes)) + " (response)",
		Ratio:    dash, Met: dash,
	}
	bd, okB := writePerClient(s.BaselineDelta)
	rd, okR := writePerClient(s.RelayDelta)
	r6 := row{
		Target:   fmt.Sprintf("6. Delta: bytes written per client per change (≤ %g× SotW)", targetDeltaVsSotW),
		Baseline: cellIf(okB, func() string { return fmtBytes(bd) }),
		Relay:    cellIf(okR, func() string { return fmtBytes(rd) }),
		Limit:    fmtBytes(float64(s.ClusterBytes)) + " (cluster)",
	}
	r6.Ratio, r6.Met = ratioCell(rd, rw, okR, okRS, "SotW", targetDeltaVsSotW)
	return []row{r6a, r6}
}

// writeMarkdown prints the header, the results table and the per-run details.
func (s *suiteResult) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	m := s.Machine
	fmt.Fprintf(&b, "## xds-bench: fan-out of one cluster change to %s clients\n\n", fmtCount(s.Clients))
	fmt.Fprintf(&b, "- machine: %d × %s, Linux %s, %s, %s\n", m.CPUs, m.CPUModel, m.Kernel, m.GoVersion, m.Date)
	fmt.Fprintf(&b, "- command: `%s`\n", s.Command)
	fmt.Fprintf(&b, "- workload: %s Envoy-like clients (wildcard LDS/CDS, then RDS/EDS; ADS; one connection each), "+
		"%d clusters (SotW CDS response %s, one cluster %s), then one cluster changes\n",
		fmtCount(s.Clients), s.Clusters, fmtBytes(float64(s.PayloadBytes)), fmtBytes(float64(s.ClusterBytes)))
	fmt.Fprintf(&b, "- baseline: xds-democp (go-control-plane) serving the clients; relay: xds-democp → xds-relay → clients; "+
		"limit: plain TCP writes of the response to as many loopback sockets\n\n")
	b.WriteString("| target | baseline | relay | limit | ratio | met? |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range s.rows() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Target, r.Baseline, r.Relay, r.Limit, r.Ratio, r.Met)
	}
	b.WriteString("\n### Runs\n\n")
	b.WriteString("| run | clients | synced | all synced (CPU: serving, loadgen) | change p50 / p99 / max | written to all | " +
		"change window | change CPU: serving (+ democp), loadgen | RSS before → after | bytes written |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range []*runResult{s.FloorSotW, s.FloorGRPC, s.Baseline, s.Relay, s.BaselineDelta, s.RelayDelta, s.Streams, s.Profile,
		s.BaselineGRPC, s.RelayGRPC, s.Latency} {
		if r == nil {
			continue
		}
		b.WriteString(runLine(r))
	}
	if l := s.Limit; l != nil {
		fmt.Fprintf(&b, "| limit (TCP) | %s | %s | %s (connect) | rounds %s | %s | — | %s | %s → %s | %s |\n",
			fmtCount(l.Conns), fmtCount(l.Conns), fmtDur(l.ConnectAll), fmtDurs(l.Rounds), fmtDur(l.Median),
			fmtDur(l.WriterCPU), fmtBytes(float64(l.WriterRSSBefore)), fmtBytes(float64(l.WriterRSSAfter)),
			fmtBytes(float64(l.WriterWrite)))
	}
	if r := s.Relay; r != nil && r.RelayGoroutines > 0 {
		n := r.Config.Clients
		fmt.Fprintf(&b, "\nRelay memory per client once synced: RSS %s, Go heap in use %s, goroutine stacks %s "+
			"(%.1f goroutines per client); democp behind it: %s RSS.\n",
			fmtBytes(perClient(float64(r.ServerRSSAfter)-float64(r.ServerRSSBefore), n)),
			fmtBytes(perClient(r.RelayHeapAfter-r.RelayHeapBefore, n)), fmtBytes(perClient(r.RelayStack, n)),
			perClient(r.RelayGoroutines, n), fmtBytes(float64(r.DemocpRSSAfter)))
	}
	if r := s.Relay; r != nil && r.RelayResponseBytes > 0 {
		fmt.Fprintf(&b, "\nRelay `xds_relay_response_bytes_total` per client over the change: SotW %s",
			fmtBytes(perClient(r.RelayResponseBytes, r.Config.Clients)))
		if d := s.RelayDelta; d != nil {
			fmt.Fprintf(&b, ", Delta %s", fmtBytes(perClient(d.RelayResponseBytes, d.Config.Clients)))
		}
		b.WriteString(".\n")
	}
	s.writeFloors(&b)
	s.writeShapes(&b)
	s.writeLRS(&b)
	if len(s.Errors) > 0 {
		b.WriteString("\nFailed runs:\n\n")
		for name, e := range s.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", name, strings.ReplaceAll(e, "\n", " "))
		}
	}
	if s.ProfileTop != "" {
		fmt.Fprintf(&b, "\n### Relay CPU profile during the change (%s)\n\n```\n%s\n```\n", s.Profile.Config.Protocol,
			strings.TrimSpace(s.ProfileTop))
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}

// runLine formats one row of the runs table.
func runLine(r *runResult) string {
	c := r.Config
	synced, all, prop := dash, dash, dash
	if lg := r.Loadgen; lg != nil {
		synced = fmtCount(lg.Synced)
		if d, ok := syncAll(r); ok {
			all = fmtDur(d)
		}
		if p := lg.Propagation; p.Samples > 0 {
			ms := func(f float64) string { return fmtDur(time.Duration(f * float64(time.Millisecond))) }
			prop = ms(p.P50) + " / " + ms(p.P99) + " / " + ms(p.Max)
		}
	}
	all += " (" + fmtDur(r.SyncServerCPU) + ", " + fmtDur(r.SyncLoadgenCPU) + ")"
	written, window, cpu, bytesOut := dash, dash, dash, dash
	if c.Change && r.ChangeWindow > 0 {
		if d, ok := writtenAll(r); ok {
			written = fmtDur(d)
		}
		window = fmtDur(r.ChangeWindow)
		cpu = fmtDur(r.ServerCPU)
		if c.Relay {
			cpu += " (+ " + fmtDur(r.DemocpCPU) + ")"
		}
		cpu += ", " + fmtDur(r.LoadgenCPU)
		bytesOut = fmtBytes(float64(r.ServerWrite))
	}
	clients := fmtCount(c.Clients)
	if c.StreamsPerConn > 1 {
		clients += fmt.Sprintf(" (%d/conn)", c.StreamsPerConn)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s → %s | %s |\n", c.Name, clients, synced, all, prop,
		written, window, cpu, fmtBytes(float64(r.ServerRSSBefore)), fmtBytes(float64(r.ServerRSSAfter)), bytesOut)
}

// fmtDur prints a duration with about three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return trimFloat(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return trimFloat(float64(d)/float64(time.Millisecond)) + " ms"
	}
	return trimFloat(d.Seconds()) + " s"
}

func fmtDurs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmtDur(d)
	}
	return strings.Join(parts, ", ")
}

// trimFloat prints f with three significant digits (at least the integer part).
func trimFloat(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.2f", f)
}

// fmtBytes prints a byte count in binary units with three significant digits.
func fmtBytes(n float64) string {
	if math.IsNaN(n) {
		return dash
	}
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%s%.0f B", neg, n)
	}
	return neg + trimFloat(n) + " " + units[i]
}

// fmtRatio prints a ratio like "0.12×" or "3.4×".
func fmtRatio(q float64) string {
	if q >= 10 {
		return fmt.Sprintf("%.0f×", q)
	}
	if q >= 0.1 {
		return fmt.Sprintf("%.2g×", q)
	}
	return fmt.Sprintf("%.1g×", q)
}

// fmtCount prints an integer with thousands separators: 10,000.
func fmtCount(n int) string {
	s := fmt.Sprint(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return neg + b.String()
}
