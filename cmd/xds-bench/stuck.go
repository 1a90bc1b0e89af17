package main

import (
	"context"
	"fmt"
	"time"
)

// The stuck run (issue 13): clients that stopped reading must not stall
// anyone. One relay serves H healthy Envoy-like clients; after a change to
// warm up, a change is measured with them alone. Then S clients join that
// subscribe alike and, once synced, never read their stream again
// (xds-loadgen --stuck: the connection stays open, its flow-control window
// fills, the relay's sends to them block). A few changes fill their
// windows, then the same change is measured again at the same healthy
// clients: the time it takes them with the stuck clients beside them
// against alone, and what the stuck streams cost the relay in memory.

// healthyWait bounds the wait for the healthy clients to report the change
// made beside the stuck ones: a relay whose senders all block never
// delivers it.
const healthyWait = 60 * time.Second

// stuckWindowBytes is what a stuck stream absorbs before the relay's sends
// to it block: the client's stream window (xds-loadgen --stuck: 64 KiB) and
// grpc-go's per-stream write quota on the server (64 KiB).
const stuckWindowBytes = 128 << 10

// stuckResult is what the stuck run measured. Durations are in nanoseconds
// in JSON.
type stuckResult struct {
	Stuck   int `json:"stuck"`
	Healthy int `json:"healthy"`
	// ResponseBytes is one coalesced response: the SotW CDS response.
	ResponseBytes int `json:"response_bytes"`
	// Alone and WithStuck are the healthy clients' propagation of one
	// change without and with the stuck clients.
	Alone     *latencies `json:"alone"`
	WithStuck *latencies `json:"with_stuck"`
	// Missing counts the healthy clients that had not reported the change
	// with the stuck clients within healthyWait.
	Missing int `json:"missing"`
	// The relay's CPU over each change's window.
	RelayCPUAlone     time.Duration `json:"relay_cpu_alone"`
	RelayCPUWithStuck time.Duration `json:"relay_cpu_with_stuck"`
	// StuckSynced is how many stuck clients synced before they stopped reading.
	StuckSynced int `json:"stuck_synced"`
	// FillChanges were made between the two measured changes; FillWritten
	// is what the relay wrote over them (socket writes, every client).
	FillChanges int    `json:"fill_changes"`
	FillWritten uint64 `json:"fill_written"`
	// The relay's memory, quiet: with the healthy clients synced (after the
	// first change), with the stuck clients synced too, and after the fill
	// and the second change (the stuck streams blocked).
	Healthy0 relayMemory `json:"with_healthy"`
	Synced   relayMemory `json:"stuck_synced_memory"`
	Held     relayMemory `json:"stuck_held_memory"`
}

// relayMemory is a relay's resident set and Go heap in use at one moment.
type relayMemory struct {
	RSS  uint64  `json:"rss"`
	Heap float64 `json:"heap_inuse"`
}

// memoryOf samples r's RSS and its go_memstats_heap_inuse_bytes.
func memoryOf(ctx context.Context, r *relayProc) (relayMemory, error) {
	s, err := sampleProc(r.c.pid())
	if err != nil {
		return relayMemory{}, err
	}
	m, err := r.metrics(ctx)
	if err != nil {
		return relayMemory{}, err
	}
	heap, _ := m.sum("go_memstats_heap_inuse_bytes", nil)
	return relayMemory{RSS: s.RSS, Heap: heap}, nil
}

// changeAndSettle makes n changes, each followed by a quiet spell of pids.
func changeAndSettle(ctx context.Context, controlAddr string, pids []int, n int) error {
	for range n {
		if _, err := makeChange(ctx, controlAddr); err != nil {
			return err
		}
		if _, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// quietMemory waits for a quiet spell of pids and then samples r's memory.
func quietMemory(ctx context.Context, pids []int, r *relayProc) (relayMemory, error) {
	if _, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second); err != nil {
		return relayMemory{}, err
	}
	return memoryOf(ctx, r)
}

// runStuck runs the stuck shape: stuck clients beside healthy ones; fill
// changes (0: enough to fill every stuck stream's windows) before the
// second measured change; responseBytes is one SotW CDS response.
func runStuck(ctx context.Context, e env, stuck, healthy, fill, responseBytes int) (*stuckResult, error) {
	if fill == 0 {
		fill = (stuckWindowBytes+responseBytes-1)/responseBytes + 1
	}
	res := &stuckResult{Stuck: stuck, Healthy: healthy, ResponseBytes: responseBytes, FillChanges: fill}
	srv, err := startServers(ctx, e, "stuck", true, modeEnvoy)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	hl, err := startClients(e, "stuck-healthy-loadgen", srv.target(), healthy, 1, modeEnvoy, "sotw")
	if err != nil {
		return nil, err
	}
	defer hl.stopQuietly() // a no-op once finished
	e.logf("stuck: %d healthy clients connecting to %s", healthy, srv.target())
	if err := waitSynced(ctx, e, "stuck (healthy)", hl, healthy); err != nil {
		return nil, err
	}
	pids := []int{srv.relay.c.pid(), hl.c.pid(), srv.democp.pid()}
	alone, err := measureHealthyAlone(ctx, e, srv, hl, pids, res)
	if err != nil {
		return nil, err
	}

	sl, err := startClients(e, "stuck-stuck-loadgen", srv.target(), stuck, 1, modeEnvoy, "sotw", "--stuck", "1")
	if err != nil {
		return nil, err
	}
	defer sl.stopQuietly()
	e.logf("stuck: %d clients that stop reading once synced connecting to %s", stuck, srv.target())
	if err := waitSynced(ctx, e, "stuck (stuck)", sl, stuck); err != nil {
		return nil, err
	}
	pids = append(pids, sl.c.pid())
	if res.Synced, err = quietMemory(ctx, pids, srv.relay); err != nil {
		return nil, err
	}
	if res.FillWritten, err = fillStuckWindows(ctx, e, srv, pids, fill); err != nil {
		return nil, err
	}
	with, err := measureWithStuck(ctx, e, srv, hl, pids, res)
	if err != nil {
		return nil, err
	}
	if err := finishStuck(hl, sl, alone, with, res); err != nil {
		return nil, err
	}
	e.logf("stuck: done")
	return res, nil
}

// measureHealthyAlone measures a change at the healthy clients before any
// stuck client joins, and records the relay's CPU over it and its memory.
func measureHealthyAlone(ctx context.Context, e env, srv *servers, hl *loadgen, pids []int, res *stuckResult) (*window, error) {
	// A first change, not measured, so that neither measured change is the
	// relay's first after the sync (the second follows the fill changes).
	if err := changeAndSettle(ctx, srv.controlAddr, pids, 1); err != nil {
		return nil, err
	}
	alone, err := measureWindow(ctx, e, windowSpec{name: "stuck (healthy alone)", controlAddr: srv.controlAddr,
		pids: pids, expect: []expect{{hl, res.Healthy}}, confirmWithin: 3 * time.Minute})
	if err != nil {
		return nil, err
	}
	if alone.Missing > 0 {
		return nil, fmt.Errorf("bench: stuck: %d of %d healthy clients did not report the change within 3m",
			alone.Missing, res.Healthy)
	}
	res.RelayCPUAlone = alone.CPU[0]
	if res.Healthy0, err = memoryOf(ctx, srv.relay); err != nil {
		return nil, err
	}
	return alone, nil
}

// fillStuckWindows makes fill changes, enough to fill the stuck streams'
// windows, and returns what the relay wrote over them.
func fillStuckWindows(ctx context.Context, e env, srv *servers, pids []int, fill int) (uint64, error) {
	e.logf("stuck: %d changes to fill the stuck streams' windows", fill)
	f0, err := sampleProc(srv.relay.c.pid())
	if err != nil {
		return 0, err
	}
	if err := changeAndSettle(ctx, srv.controlAddr, pids, fill); err != nil {
		return 0, err
	}
	f1, err := sampleProc(srv.relay.c.pid())
	if err != nil {
		return 0, err
	}
	return f1.Wchr - f0.Wchr, nil
}

// measureWithStuck measures a change at the healthy clients beside the
// blocked stuck streams, and records the relay's CPU over it and its memory.
func measureWithStuck(ctx context.Context, e env, srv *servers, hl *loadgen, pids []int, res *stuckResult) (*window, error) {
	with, err := measureWindow(ctx, e, windowSpec{name: "stuck (with stuck clients)", controlAddr: srv.controlAddr,
		pids: pids, expect: []expect{{hl, res.Healthy}}, confirmWithin: healthyWait})
	if err != nil {
		return nil, err
	}
	res.Missing = with.Missing
	res.RelayCPUWithStuck = with.CPU[0]
	if res.Held, err = quietMemory(ctx, pids, srv.relay); err != nil {
		return nil, err
	}
	return with, nil
}

// finishStuck ends both loadgens and records the healthy clients'
// propagation of the two measured changes and how many stuck clients synced.
func finishStuck(hl, sl *loadgen, alone, with *window, res *stuckResult) error {
	hs, err := hl.finish(2 * time.Minute)
	if err != nil {
		return err
	}
	if l, ok := hs.change(alone.Created); ok {
		res.Alone = &l
	}
	if l, ok := hs.change(with.Created); ok {
		res.WithStuck = &l
	}
	ss, err := sl.finish(2 * time.Minute)
	if err != nil {
		return err
	}
	res.StuckSynced = ss.Synced
	return nil
}
