package main

import (
	"fmt"
	"strings"
	"time"
)

// The targets of the fleet shapes (issue 13).
const (
	// T7: gRPC-like clients cost the relay at most this multiple of the
	// Envoy-like clients' CPU per change, and their last client has it
	// within this multiple of the Envoy-like last client's time.
	targetGRPCVsEnvoy = 1.5
	// T8: the healthy clients have a change within this multiple of their
	// time without stuck clients beside them.
	targetStuckVsAlone = 1.2
	// T8b: a stuck stream grows the relay's memory by at most this many
	// coalesced responses.
	targetStuckGrowth = 1.0
	// T9: a new client's first response and an admin request during a
	// fan-out wait at most this long.
	targetProbeMax = 20 * time.Millisecond
)

// shapeRow is one line of the fleet-shapes targets table.
type shapeRow struct {
	Target, Measured, Against, Ratio, Met string
}

// lastClient returns the time until the last client had the run's change.
func lastClient(l *latencies) (time.Duration, bool) {
	if l == nil || l.Samples == 0 {
		return 0, false
	}
	return msDur(l.Max), true
}

func msDur(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// fmtLatencies prints p50 / p99 / max.
func fmtLatencies(l *latencies) string {
	if l == nil || l.Samples == 0 {
		return dash
	}
	return fmtDur(msDur(l.P50)) + " / " + fmtDur(msDur(l.P99)) + " / " + fmtDur(msDur(l.Max))
}

// vsRow compares a measured figure against a reference with a limit on the ratio.
func vsRow(target string, got, ref float64, okGot, okRef bool, gotCell, refCell, what string, limit float64) shapeRow {
	r := shapeRow{Target: target, Measured: dash, Against: dash, Ratio: dash, Met: dash}
	if okGot {
		r.Measured = gotCell
	}
	if okRef {
		r.Against = refCell
	}
	r.Ratio, r.Met = ratioCell(got, ref, okGot, okRef, what, limit)
	return r
}

// duplicates returns the responses a relay run sent beyond one per client
// over the change, and whether it is known.
func duplicates(r *runResult) (float64, bool) {
	if r == nil || !r.Config.Relay || r.ChangeWindow == 0 || r.RelayResponses == 0 {
		return 0, false
	}
	return max(r.RelayResponses-float64(r.Config.Clients), 0), true
}

// shapeRows builds the fleet-shapes targets table; nil when no shape ran.
func (s *suiteResult) shapeRows() []shapeRow {
	var rows []shapeRow
	if g := s.RelayGRPC; g != nil {
		n := fmtCount(g.Config.Clients)
		gc, okG := g.ServerCPU, g.ChangeWindow > 0
		var ec time.Duration
		okE := s.Relay != nil && s.Relay.ChangeWindow > 0
		if okE {
			ec = s.Relay.ServerCPU
		}
		rows = append(rows, vsRow(
			fmt.Sprintf("7. %s gRPC-like clients: relay CPU of a one-cluster change (≤ %g× Envoy-like)", n, targetGRPCVsEnvoy),
			float64(gc), float64(ec), okG, okE, fmtDur(gc), fmtDur(ec)+" (Envoy-like)", "Envoy-like", targetGRPCVsEnvoy))
		gl, okG := lastClient(g.Change)
		var el time.Duration
		okE = false
		if s.Relay != nil {
			el, okE = lastClient(s.Relay.Change)
		}
		rows = append(rows, vsRow(
			fmt.Sprintf("7b. %s gRPC-like clients: last client has the change (≤ %g× Envoy-like)", n, targetGRPCVsEnvoy),
			float64(gl), float64(el), okG, okE, fmtDur(gl), fmtDur(el)+" (Envoy-like)", "Envoy-like", targetGRPCVsEnvoy))
	}
	if st := s.Stuck; st != nil {
		with, okW := lastClient(st.WithStuck)
		alone, okA := lastClient(st.Alone)
		r := vsRow(fmt.Sprintf("8. %s healthy beside %s stuck clients: last healthy client has the change (≤ %g× without)",
			fmtCount(st.Healthy), fmtCount(st.Stuck), targetStuckVsAlone),
			float64(with), float64(alone), okW, okA, fmtDur(with), fmtDur(alone)+" (alone)", "alone", targetStuckVsAlone)
		if st.Missing > 0 {
			r.Measured = fmt.Sprintf("%s of %s had it after %s", fmtCount(st.Healthy-st.Missing), fmtCount(st.Healthy),
				fmtDur(healthyWait))
			r.Ratio, r.Met = dash, "**no**"
		}
		rows = append(rows, r)
		growth := perClient(float64(st.Held.RSS)-float64(st.Synced.RSS), st.Stuck)
		r = vsRow(fmt.Sprintf("8b. relay RSS growth per stuck stream while stuck (≤ %g coalesced response)",
			targetStuckGrowth), growth, float64(st.ResponseBytes), true, true, fmtBytes(growth),
			fmtBytes(float64(st.ResponseBytes))+" (response)", "response", targetStuckGrowth)
		if st.Missing > 0 {
			r.Met = "— (the change did not go out)"
		}
		rows = append(rows, r)
	}
	if l := s.Latency; l != nil {
		for i, p := range l.Probes {
			n := "9"
			if i > 0 {
				n += string(rune('a' + i)) // 9b, 9c
			}
			r := shapeRow{Target: fmt.Sprintf("%s. during the fan-out to %s clients, %s: max (≤ %s)",
				n, fmtCount(l.Config.Clients), p.Name, fmtDur(targetProbeMax)),
				Measured: dash, Against: fmtDur(targetProbeMax), Ratio: dash, Met: dash}
			if p.Count > 0 {
				r.Measured = fmt.Sprintf("%s (p99 %s, %d probes)", fmtDur(p.Max), fmtDur(p.P99), p.Count)
				r.Ratio = fmtRatio(float64(p.Max) / float64(targetProbeMax))
				r.Met = metCell(p.Max <= targetProbeMax && p.Errors == 0,
					fmtRatio(float64(p.Max)/float64(targetProbeMax))+" over")
			}
			if p.Errors > 0 {
				r.Met = fmt.Sprintf("**no** (%d errors)", p.Errors)
			}
			rows = append(rows, r)
		}
	}
	for _, r := range []*runResult{s.Relay, s.RelayGRPC} { // the latency run's probes get responses too
		if d, ok := duplicates(r); ok {
			rows = append(rows, shapeRow{Target: fmt.Sprintf("10. %s: responses beyond one per client for one change (= 0)",
				r.Config.Name), Measured: fmt.Sprintf("%.0f", d), Against: "0", Ratio: dash,
				Met: metCell(d == 0, fmt.Sprintf("%.0f duplicates", d))})
		}
	}
	for _, r := range []*runResult{s.RelayGRPC} {
		if r != nil {
			rows = append(rows, shapeRow{Target: fmt.Sprintf("10b. %s: connections to the control plane (= 1)", r.Config.Name),
				Measured: fmt.Sprintf("%d (upstream_connected %g)", r.DemocpConns, r.UpstreamConnected), Against: "1",
				Ratio: dash, Met: metCell(r.DemocpConns == 1 && r.UpstreamConnected == 1,
					fmt.Sprintf("%d connections", r.DemocpConns))})
		}
	}
	return rows
}

// writeShapes prints the fleet-shapes section (issue 13) when any shape ran.
func (s *suiteResult) writeShapes(b *strings.Builder) {
	rows := s.shapeRows()
	if len(rows) == 0 && s.Tiered == nil {
		return
	}
	b.WriteString("\n### Fleet shapes (issue 13)\n\n")
	if len(rows) > 0 {
		b.WriteString("| target | measured | against | ratio | met? |\n| --- | --- | --- | --- | --- |\n")
		for _, r := range rows {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.Target, r.Measured, r.Against, r.Ratio, r.Met)
		}
	}
	s.writeShapeRuns(b)
	s.writeStuck(b)
	s.writeProbes(b)
	s.writeTiered(b)
}

// writeShapeRuns prints the one-cluster change per client shape.
func (s *suiteResult) writeShapeRuns(b *strings.Builder) {
	if s.RelayGRPC == nil && s.BaselineGRPC == nil {
		return
	}
	b.WriteString("\n#### One cluster change, by client shape\n\n" +
		"| run | clients | CPU of the change: serving (per client) | clients have it p50 / p99 / max | " +
		"bytes written per client | responses per client | upstream connections |\n" +
		"| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range []*runResult{s.Relay, s.RelayGRPC, s.Baseline, s.BaselineGRPC} {
		if r == nil {
			continue
		}
		c := r.Config
		cpu, bytesOut, resp := dash, dash, dash
		if r.ChangeWindow > 0 {
			cpu = fmt.Sprintf("%s (%s)", fmtDur(r.ServerCPU), fmtDur(time.Duration(perClient(float64(r.ServerCPU), c.Clients))))
			bytesOut = fmtBytes(perClient(float64(r.ServerWrite), c.Clients))
		}
		if c.Relay && r.ChangeWindow > 0 {
			resp = fmt.Sprintf("%.2f", perClient(r.RelayResponses, c.Clients))
		}
		fmt.Fprintf(b, "| %s (%s) | %s | %s | %s | %s | %s | %s |\n", c.Name, c.Mode, fmtCount(c.Clients), cpu,
			fmtLatencies(r.Change), bytesOut, resp, fmtCount(r.DemocpConns))
	}
}

// writeStuck prints the stuck run's phases.
func (s *suiteResult) writeStuck(b *strings.Builder) {
	st := s.Stuck
	if st == nil {
		return
	}
	mem := func(m relayMemory) string {
		return fmt.Sprintf("%s (heap %s)", fmtBytes(float64(m.RSS)), fmtBytes(m.Heap))
	}
	with := fmtLatencies(st.WithStuck)
	if st.Missing > 0 {
		with += fmt.Sprintf(" (%s of %s had it after %s)", fmtCount(st.Healthy-st.Missing), fmtCount(st.Healthy),
			fmtDur(healthyWait))
	}
	fmt.Fprintf(b, "\n#### Stuck clients: %s healthy, then %s that stop reading once synced\n\n", fmtCount(st.Healthy),
		fmtCount(st.Stuck))
	b.WriteString("| phase | healthy clients have the change p50 / p99 / max | relay CPU of the change | relay RSS (Go heap in use) |\n" +
		"| --- | --- | --- | --- |\n")
	fmt.Fprintf(b, "| %s healthy clients alone | %s | %s | %s |\n", fmtCount(st.Healthy), fmtLatencies(st.Alone),
		fmtDur(st.RelayCPUAlone), mem(st.Healthy0))
	fmt.Fprintf(b, "| + %s stuck clients synced (%s synced) | — | — | %s |\n", fmtCount(st.Stuck), fmtCount(st.StuckSynced),
		mem(st.Synced))
	fmt.Fprintf(b, "| + %d changes to fill their windows, then the change | %s | %s | %s |\n", st.FillChanges, with,
		fmtDur(st.RelayCPUWithStuck), mem(st.Held))
	perStuck := func(a, b relayMemory) string {
		return fmt.Sprintf("%s RSS (heap %s)", fmtBytes(perClient(float64(b.RSS)-float64(a.RSS), st.Stuck)),
			fmtBytes(perClient(b.Heap-a.Heap, st.Stuck)))
	}
	all := float64(st.Stuck+st.Healthy) * float64(st.FillChanges) * float64(st.ResponseBytes)
	fmt.Fprintf(b, "\nPer stuck client: %s once connected and synced; %s more once stuck, against one coalesced "+
		"response of %s. Over the fill changes the relay wrote %s (%s if every client had read every response).\n",
		perStuck(st.Healthy0, st.Synced), perStuck(st.Synced, st.Held), fmtBytes(float64(st.ResponseBytes)),
		fmtBytes(float64(st.FillWritten)), fmtBytes(all))
}

// writeProbes prints the latency histograms measured during a fan-out.
func (s *suiteResult) writeProbes(b *strings.Builder) {
	l := s.Latency
	if l == nil || len(l.Probes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n#### Latency during the fan-out of one change to %s clients (%s of window)\n\n",
		fmtCount(l.Config.Clients), fmtDur(l.ChangeWindow))
	b.WriteString("| probe | when | count | errors | p50 | p90 | p99 | max |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for i, p := range l.Probes {
		line := func(when string, p probeStats) {
			fmt.Fprintf(b, "| %s | %s | %d | %d | %s | %s | %s | %s |\n", p.Name, when, p.Count, p.Errors, fmtDur(p.P50),
				fmtDur(p.P90), fmtDur(p.P99), fmtDur(p.Max))
		}
		line("fan-out", p)
		if i < len(l.IdleProbes) {
			line("idle, 1 s before", l.IdleProbes[i])
		}
	}
	for _, p := range append(l.Probes, l.IdleProbes...) {
		if p.LastError != "" {
			fmt.Fprintf(b, "\n%s, last error: %s\n", p.Name, p.LastError)
		}
	}
}

// writeTiered prints the tiered run, tier by tier.
func (s *suiteResult) writeTiered(b *strings.Builder) {
	t := s.Tiered
	if t == nil {
		return
	}
	fmt.Fprintf(b, "\n#### Tiered: democp → relay → 2 relays → %s clients (change window %s)\n\n", fmtCount(t.Clients),
		fmtDur(t.ChangeWindow))
	b.WriteString("| tier | serves | has the change (after its creation) | CPU of the change | RSS once synced | " +
		"upstream streams | responses sent |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, tr := range t.Tiers {
		received, up, resp := dash, dash, dash
		if tr.Name != "democp" {
			received = fmtDur(tr.Received)
			up = fmt.Sprintf("%g", tr.UpstreamConnected)
			resp = fmt.Sprintf("%.0f", tr.Responses)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", tr.Name, fmtCount(tr.Serves), received, fmtDur(tr.CPU),
			fmtBytes(float64(tr.RSS)), up, resp)
	}
	for i, l := range t.Leaves {
		name := fmt.Sprintf("clients of tier-2%c", 'a'+i)
		fmt.Fprintf(b, "| %s | — | p50 / p99 / max %s | %s (both loadgens) | — | — | — |\n", name, fmtLatencies(l),
			fmtDur(t.LoadgenCPU))
	}
}
