package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// expect is a loadgen whose clients must each report the change.
type expect struct {
	lg      *loadgen
	clients int
}

// windowSpec says what measureWindow measures and waits for.
type windowSpec struct {
	// name labels progress lines.
	name string
	// controlAddr is democp's control endpoint, which makes the change.
	controlAddr string
	// pids are the processes measured; the first one is the serving
	// process, whose socket writes are sampled.
	pids []int
	// expect are the loadgens that confirm the change.
	expect []expect
	// confirmWithin bounds the wait for the confirmation; when it passes,
	// the window ends at the quiet spell and missing says how many clients
	// did not report the change.
	confirmWithin time.Duration
	// beforeChange, when set, runs after the idle rates are taken, just
	// before the change (a metrics scrape, a profile's start, probes).
	beforeChange func() error
}

// window is one change measured from the outside.
type window struct {
	// Created is the change's creation stamp (Unix nanoseconds): the key of
	// its propagation in the loadgens' summaries.
	Created int64
	// Length is from the change request until every process was quiet again
	// (or, when some was busy again after that, until the confirmation).
	Length time.Duration
	// WrittenAll is from the change request until the serving process had
	// written 99 % of the window's bytes.
	WrittenAll time.Duration
	// CPU of each process over the window, in the order of windowSpec.pids
	// (less the idle rate when the window had to run to the confirmation).
	CPU []time.Duration
	// Write is the serving process's wchar growth over the window.
	Write uint64
	// Updates is how many updates the expected loadgens reported.
	Updates int64
	// Missing counts the expected clients that had not reported the change
	// within confirmWithin.
	Missing int
}

// makeChange changes one cluster through democp's control endpoint and
// returns the change's creation stamp.
func makeChange(ctx context.Context, controlAddr string) (int64, error) {
	b, err := httpDo(ctx, newHTTPClient(), "POST", "http://"+controlAddr+"/change?type=cds&count=1")
	if err != nil {
		return 0, err
	}
	var c fleet.ChangeJSON
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("bench: change answer %q: %w", truncateString(string(b), 100), err)
	}
	return c.CreatedUnixNano, nil
}

// measureWindow makes one CDS change and measures the processes until every
// expected client has it and they are quiet again.
func measureWindow(ctx context.Context, e env, ws windowSpec) (*window, error) {
	idle, err := sampleIdle(ctx, ws.pids)
	if err != nil {
		return nil, err
	}
	// Each loadgen's count of updates from a progress line written since the
	// processes went quiet: an older one may miss the last change's updates.
	base := make([]int64, len(ws.expect))
	for i, x := range ws.expect {
		p, err := x.lg.lineSince(ctx, idle.a[0].At)
		if err != nil {
			return nil, err
		}
		base[i] = p.Updates
	}
	if ws.beforeChange != nil {
		if err := ws.beforeChange(); err != nil {
			return nil, err
		}
	}

	w := &window{}
	c0, c1, series, err := w.changeUntilQuiet(ctx, e, ws)
	if err != nil {
		return nil, err
	}
	if err := w.confirm(ctx, e, ws, base); err != nil {
		return nil, err
	}
	end := c1
	runToConfirmation := false
	if w.Missing == 0 {
		if end, runToConfirmation, err = quietAfterConfirmation(ctx, e, ws, c1, idle); err != nil {
			return nil, err
		}
	}
	w.measure(c0, end, series, idle, runToConfirmation)
	return w, nil
}

// idleSamples are two samples of the measured processes, quiet, a second
// apart: their idle rates, to take out of a window that has to run to the
// confirmation.
type idleSamples struct {
	a, b []procSample
}

// sampleIdle samples pids twice, a second apart.
func sampleIdle(ctx context.Context, pids []int) (idleSamples, error) {
	a, err := sampleAll(pids)
	if err != nil {
		return idleSamples{}, err
	}
	if err := pause(ctx, time.Second); err != nil {
		return idleSamples{}, err
	}
	b, err := sampleAll(pids)
	if err != nil {
		return idleSamples{}, err
	}
	return idleSamples{a: a, b: b}, nil
}

// cpu is the CPU process i spends over d at its idle rate.
func (s idleSamples) cpu(i int, d time.Duration) time.Duration {
	return idleCPU(s.a[i], s.b[i], d)
}

// changeUntilQuiet makes the change and returns samples of the processes
// just before it and once they are quiet again, and the serving process's
// samples in between.
func (w *window) changeUntilQuiet(ctx context.Context, e env, ws windowSpec) (c0, c1, series []procSample, err error) {
	writes := startSampler(ws.pids[0], 10*time.Millisecond)
	if c0, err = sampleAll(ws.pids); err != nil {
		writes.stop()
		return nil, nil, nil, err
	}
	if w.Created, err = makeChange(ctx, ws.controlAddr); err != nil {
		writes.stop()
		return nil, nil, nil, err
	}
	want := 0
	for _, x := range ws.expect {
		want += x.clients
	}
	e.logf("%s: one cluster changed; waiting for %d clients", ws.name, want)
	// The window ends when every process is quiet again (300 ms with at most
	// one clock tick each): the responses are sent, read and ACKed.
	c1, err = quiesce(ctx, ws.pids, 300*time.Millisecond, 3*time.Minute)
	series = writes.stop()
	if err != nil {
		return nil, nil, nil, err
	}
	return c0, c1, series, nil
}

// confirm waits up to ws.confirmWithin for the loadgens to confirm that
// every client has the change (their updates beyond base), and records the
// updates and the clients missing.
func (w *window) confirm(ctx context.Context, e env, ws windowSpec, base []int64) error {
	wctx, cancel := context.WithTimeout(ctx, ws.confirmWithin)
	defer cancel()
	for i, x := range ws.expect {
		p, err := x.lg.waitFor(wctx, "every client has the change", func(p progress) bool {
			return p.Updates >= base[i]+int64(x.clients)
		})
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			p, _ = x.lg.latest()
			w.Missing += x.clients - int(min(p.Updates-base[i], int64(x.clients)))
			e.logf("%s: %d clients did not report the change within %v", ws.name, w.Missing, ws.confirmWithin)
		} else if err != nil {
			return err
		}
		w.Updates += p.Updates - base[i]
	}
	return nil
}

// quietAfterConfirmation waits for another quiet spell after the
// confirmation and returns where the window ends: at the first quiet spell
// c1, or, when some process was busy again after it, at the second, and
// then runToConfirmation is true.
func quietAfterConfirmation(ctx context.Context, e env, ws windowSpec, c1 []procSample, idle idleSamples) (
	end []procSample, runToConfirmation bool, err error) {
	c2, err := quiesce(ctx, ws.pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return nil, false, err
	}
	for i := range ws.pids {
		if late := c2[i].CPU - c1[i].CPU - idle.cpu(i, c2[i].At.Sub(c1[i].At)); late > 3*clockTick {
			// Busy again after the quiet spell: count until the confirmation, less the idle rate.
			e.logf("%s: process %d used %v more CPU after the quiet spell; the window runs to the confirmation",
				ws.name, ws.pids[i], late)
			runToConfirmation = true
		}
	}
	if runToConfirmation {
		return c2, true, nil
	}
	return c1, false, nil
}

// measure sets the window's length, CPU and writes from the samples at its
// start and end, less the idle rate when it ran to the confirmation.
func (w *window) measure(c0, end, series []procSample, idle idleSamples, runToConfirmation bool) {
	w.Length = end[0].At.Sub(c0[0].At)
	if at, ok := writtenBy(series, 0.99); ok {
		w.WrittenAll = at.Sub(c0[0].At)
	}
	w.CPU = make([]time.Duration, len(c0))
	for i := range c0 {
		d := end[i].CPU - c0[i].CPU
		if runToConfirmation {
			d -= idle.cpu(i, end[i].At.Sub(c0[i].At))
		}
		w.CPU[i] = max(d, 0)
	}
	w.Write = end[0].Wchr - c0[0].Wchr
}

// idleCPU is the CPU a process spends over d at the idle rate measured
// between two samples.
func idleCPU(a, b procSample, d time.Duration) time.Duration {
	rate := float64(b.CPU-a.CPU) / float64(b.At.Sub(a.At))
	return time.Duration(rate * float64(d))
}
