package main

import (
	"fmt"
	"strings"
	"time"
)

// The targets of issue 26, each against the same invocation's floors.
const (
	// The relay's CPU of a change at most this multiple of the gRPC floor's…
	targetCPUVsFloor = 1.5
	// … and of the TCP limit's.
	targetCPUVsLimit = 5.0
	// The last client has the change within this multiple of the TCP limit.
	targetLastVsLimit = 3.0
	// The relay's RSS per client: Envoy-like (wildcard) and gRPC-like (by name).
	targetMemEnvoy = 32 << 10
	targetMemGRPC  = 36 << 10
)

// floorRow is one line of the floors table: one figure of one shape.
type floorRow struct {
	Shape, Figure, Relay, Floor, Limit, VsFloor, VsLimit, Target, Met string
}

// floorFigure is one figure of the relay, the gRPC floor and the TCP limit,
// each with whether it was measured.
type floorFigure struct {
	relay, floor, limit       float64
	okRelay, okFloor, okLimit bool
	format                    func(float64) string
}

func fmtDurF(f float64) string { return fmtDur(time.Duration(f)) }

// row formats the figure with its ratios; maxFloor and maxLimit bound them
// (0: no target).
func (f floorFigure) row(shape, figure string, maxFloor, maxLimit float64) floorRow {
	r := floorRow{Shape: shape, Figure: figure, Relay: dash, Floor: dash, Limit: dash, VsFloor: dash, VsLimit: dash,
		Target: dash, Met: dash}
	for _, c := range []struct {
		ok   bool
		v    float64
		cell *string
	}{{f.okRelay, f.relay, &r.Relay}, {f.okFloor, f.floor, &r.Floor}, {f.okLimit, f.limit, &r.Limit}} {
		if c.ok {
			*c.cell = f.format(c.v)
		}
	}
	var targets, misses []string
	judged := false
	for _, c := range []struct {
		ok   bool
		ref  float64
		max  float64
		what string
		cell *string
	}{{f.okFloor, f.floor, maxFloor, "floor", &r.VsFloor}, {f.okLimit, f.limit, maxLimit, "limit", &r.VsLimit}} {
		if c.max > 0 {
			targets = append(targets, fmt.Sprintf("≤ %g× %s", c.max, c.what))
		}
		if !f.okRelay || !c.ok || c.ref <= 0 {
			continue
		}
		q := f.relay / c.ref
		*c.cell = fmtRatio(q)
		if c.max > 0 {
			judged = true
			if q > c.max {
				misses = append(misses, fmtRatio(q/c.max)+" over "+c.what)
			}
		}
	}
	if len(targets) > 0 {
		r.Target = strings.Join(targets, ", ")
	}
	if judged {
		r.Met = metCell(len(misses) == 0, strings.Join(misses, ", "))
	}
	return r
}

// runFigures are one run's figures for the floors table, in the order of
// the rows: CPU of the change per client, last client, p50, RSS per client.
type runFigures struct {
	v  [4]float64
	ok [4]bool
}

func figuresOf(r *runResult) runFigures {
	var f runFigures
	c, ok := cpuPerClient(r, false)
	f.v[0], f.ok[0] = float64(c), ok
	if r != nil && r.Change != nil && r.Change.Samples > 0 {
		f.v[1], f.ok[1] = float64(msDur(r.Change.Max)), true
		f.v[2], f.ok[2] = float64(msDur(r.Change.P50)), true
	}
	f.v[3], f.ok[3] = rssPerClient(r)
	return f
}

// floorShapeRows builds the rows of one client shape: relay and floor are
// its runs (either may be nil), memTarget its memory target.
func (s *suiteResult) floorShapeRows(shape string, relay, floor *runResult, memTarget float64) []floorRow {
	rf, ff := figuresOf(relay), figuresOf(floor)
	var lf runFigures // the TCP limit has no p50
	if l := s.Limit; l != nil {
		lf.v[0], lf.ok[0] = perClient(float64(l.WriterCPU), l.Conns), true
		lf.v[1], lf.ok[1] = float64(l.Median), true
		lf.v[3], lf.ok[3] = perClient(float64(l.WriterRSSAfter)-float64(l.WriterRSSBefore), l.Conns), true
	}
	fig := func(i int, format func(float64) string) floorFigure {
		return floorFigure{relay: rf.v[i], floor: ff.v[i], limit: lf.v[i], okRelay: rf.ok[i], okFloor: ff.ok[i],
			okLimit: lf.ok[i], format: format}
	}
	memRow := fig(3, fmtBytes).row(shape, "memory per client (RSS once synced)", 0, 0)
	memRow.Target = "≤ " + fmtBytes(memTarget)
	if rf.ok[3] {
		memRow.Met = metCell(rf.v[3] <= memTarget, fmtRatio(rf.v[3]/memTarget)+" over")
	}
	return []floorRow{
		fig(0, fmtDurF).row(shape, "CPU of the change per client", targetCPUVsFloor, targetCPUVsLimit),
		fig(1, fmtDurF).row(shape, "last client has the change", 0, targetLastVsLimit),
		fig(2, fmtDurF).row(shape, "clients have it, p50", 0, 0),
		memRow,
	}
}

// floorRows builds the floors table: each client shape whose gRPC floor
// ran, or whose relay run ran beside the TCP limit; nil when none did.
func (s *suiteResult) floorRows() []floorRow {
	var rows []floorRow
	for _, sh := range []struct {
		name         string
		relay, floor *runResult
		mem          float64
	}{
		{"Envoy-like (wildcard CDS)", s.Relay, s.FloorSotW, targetMemEnvoy},
		{"gRPC-like (CDS by name)", s.RelayGRPC, s.FloorGRPC, targetMemGRPC},
	} {
		if sh.floor == nil && (sh.relay == nil || s.Limit == nil) {
			continue
		}
		rows = append(rows, s.floorShapeRows(sh.name, sh.relay, sh.floor, sh.mem)...)
	}
	if s.RelayDelta != nil && (s.FloorSotW != nil || s.Limit != nil) {
		rows = append(rows, s.deltaRows()...)
	}
	return rows
}

// deltaRows are the Delta clients' rows beside the SotW floor and limit
// (Delta's one resource on the wire has no floor of its own), their CPU set
// against the SotW relay's, as issue 26 asks; its other targets are SotW's.
func (s *suiteResult) deltaRows() []floorRow {
	rows := s.floorShapeRows("Delta, Envoy-like (floor, limit: SotW's)", s.RelayDelta, s.FloorSotW, targetMemEnvoy)
	for i := range rows {
		rows[i].Target, rows[i].Met = dash, dash
	}
	rows[0].Target = "well under the SotW relay's"
	d, okD := cpuPerClient(s.RelayDelta, false)
	so, okS := cpuPerClient(s.Relay, false)
	if okD && okS && so > 0 {
		rows[0].Met = fmt.Sprintf("%s the SotW relay's %s", fmtRatio(float64(d)/float64(so)), fmtDur(so))
	}
	return rows
}

// writeFloors prints the relay beside the gRPC floor and the TCP limit
// (issue 26); nothing when floorRows has no row.
func (s *suiteResult) writeFloors(b *strings.Builder) {
	rows := s.floorRows()
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### The relay above the floors (issue 26)\n\n" +
		"Relay and gRPC floor: the same xds-loadgen clients, one cluster change, the serving process's CPU over the " +
		"change window and the clients' propagation from the change's creation stamp; TCP limit: the writer's CPU per " +
		"round and the time from its write to the last reader.\n\n" +
		"| shape | figure | relay | gRPC floor | TCP limit | relay / floor | relay / limit | target | met? |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Shape, r.Figure, r.Relay, r.Floor, r.Limit,
			r.VsFloor, r.VsLimit, r.Target, r.Met)
	}
}
