package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The tiered run (issue 13): relays in front of relays. democp → one relay
// (tier 1) → two relays (tier 2, each with the tier-1 relay as its only
// upstream) → the clients, split between the two tier-2 relays. One cluster
// changes; each tier's relay records when its upstream delivered it
// (xds_relay_upstream_last_update_timestamp_seconds, read after the
// change), the clients when they had it, and every process its CPU.

// tierResult is one process of the tree. Durations are in nanoseconds in JSON.
type tierResult struct {
	// Name is democp, tier-1, tier-2a or tier-2b.
	Name string `json:"name"`
	// Serves is the number of streams the process serves the change to:
	// relays below it, or clients.
	Serves int `json:"serves"`
	// Received is from the change's creation until the relay's upstream
	// delivered it (0 for democp, which creates it).
	Received time.Duration `json:"received"`
	// CPU over the change's window.
	CPU time.Duration `json:"cpu"`
	// RSS once every client synced and the processes were quiet.
	RSS uint64 `json:"rss"`
	// Relays: connected upstream streams (xds_relay_upstream_connected) and
	// responses sent over the change (xds_relay_responses_total).
	UpstreamConnected float64 `json:"upstream_connected,omitempty"`
	Responses         float64 `json:"responses,omitempty"`
}

// tieredResult is what the tiered run measured.
type tieredResult struct {
	Clients int          `json:"clients"`
	Tiers   []tierResult `json:"tiers"`
	// Leaves are the propagation of the change to the clients of each
	// tier-2 relay, in the order of the tier-2 entries of Tiers.
	Leaves []*latencies `json:"leaves"`
	// LoadgenCPU is the two xds-loadgen processes' CPU over the window.
	LoadgenCPU   time.Duration `json:"loadgen_cpu"`
	ChangeWindow time.Duration `json:"change_window"`
}

// runTiered runs the tiered shape with clients Envoy-like clients.
func runTiered(ctx context.Context, e env, clients int) (*tieredResult, error) {
	if clients < 2 {
		return nil, errors.New("bench: tiered: want at least 2 clients (one per tier-2 relay)")
	}
	res := &tieredResult{Clients: clients}
	t, err := startTieredTree(ctx, e, clients)
	if err != nil {
		return nil, err
	}
	defer t.stop()
	e.logf("tiered: %d clients connecting to two tier-2 relays", clients)
	for i, lg := range t.lgs {
		if err := waitSynced(ctx, e, fmt.Sprintf("tiered (tier-2%c)", 'a'+i), lg, t.leaves[i]); err != nil {
			return nil, err
		}
	}

	// Processes by index: the relays (tier 1, 2a, 2b), democp, the loadgens.
	var pids []int
	for _, r := range t.relays {
		pids = append(pids, r.c.pid())
	}
	pids = append(pids, t.srv.democp.pid(), t.lgs[0].c.pid(), t.lgs[1].c.pid())
	synced, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return nil, err
	}
	res.Tiers = []tierResult{
		{Name: "democp", Serves: 1, RSS: synced[3].RSS},
		{Name: "tier-1", Serves: 2, RSS: synced[0].RSS},
		{Name: "tier-2a", Serves: t.leaves[0], RSS: synced[1].RSS},
		{Name: "tier-2b", Serves: t.leaves[1], RSS: synced[2].RSS},
	}

	var m0 []metrics
	before := func() (err error) {
		m0, err = scrapeRelays(ctx, t.relays)
		return err
	}
	w, err := measureWindow(ctx, e, windowSpec{name: "tiered", controlAddr: t.srv.controlAddr, pids: pids,
		expect: []expect{{t.lgs[0], t.leaves[0]}, {t.lgs[1], t.leaves[1]}}, confirmWithin: 3 * time.Minute, beforeChange: before})
	if err != nil {
		return nil, err
	}
	if w.Missing > 0 {
		return nil, fmt.Errorf("bench: tiered: %d of %d clients did not report the change within 3m", w.Missing, clients)
	}
	res.ChangeWindow = w.Length
	res.Tiers[0].CPU = w.CPU[3]
	res.LoadgenCPU = w.CPU[4] + w.CPU[5]
	if err := recordRelays(ctx, t.relays, m0, w, res.Tiers[1:]); err != nil {
		return nil, err
	}
	if res.Leaves, err = finishLeaves(t.lgs, w.Created); err != nil {
		return nil, err
	}
	e.logf("tiered: done")
	return res, nil
}

// tieredTree is the processes of the tiered run, tier by tier.
type tieredTree struct {
	// srv is democp and the tier-1 relay.
	srv *servers
	// relays are the tier-1 relay and the tier-2 relays a and b.
	relays []*relayProc
	// lgs are the clients of tier-2 relay a and b; leaves their numbers.
	lgs    []*loadgen
	leaves []int
}

// startTieredTree starts democp, the tier-1 relay, two tier-2 relays below
// it and clients Envoy-like clients split between those; it stops what it
// started when a start fails.
func startTieredTree(ctx context.Context, e env, clients int) (_ *tieredTree, err error) {
	srv, err := startServers(ctx, e, "tiered", true, modeEnvoy)
	if err != nil {
		return nil, err
	}
	t := &tieredTree{srv: srv, relays: []*relayProc{srv.relay}, leaves: []int{clients - clients/2, clients / 2}}
	defer func() {
		if err != nil {
			t.stop()
		}
	}()
	for _, n := range []string{"a", "b"} {
		r, err := startRelay(ctx, e, "tiered-relay-2"+n, srv.relay.addr)
		if err != nil {
			return nil, err
		}
		t.relays = append(t.relays, r)
	}
	for i, n := range t.leaves {
		lg, err := startClients(e, fmt.Sprintf("tiered-loadgen-2%c", 'a'+i), t.relays[1+i].addr, n, 1, modeEnvoy, "sotw")
		if err != nil {
			return nil, err
		}
		t.lgs = append(t.lgs, lg)
	}
	return t, nil
}

// stop stops the processes in the reverse order of their start: the
// loadgens (a no-op once finished), the tier-2 relays, then the servers.
func (t *tieredTree) stop() {
	for i := len(t.lgs) - 1; i >= 0; i-- {
		t.lgs[i].stopQuietly()
	}
	for i := len(t.relays) - 1; i >= 1; i-- {
		t.relays[i].stop()
	}
	t.srv.stop()
}

// scrapeRelays reads every relay's metrics.
func scrapeRelays(ctx context.Context, relays []*relayProc) ([]metrics, error) {
	ms := make([]metrics, len(relays))
	for i, r := range relays {
		var err error
		if ms[i], err = r.metrics(ctx); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// recordRelays records in tiers[i] what relay i did over the window w: its
// CPU, when its upstream delivered the change, its upstream streams and the
// responses it sent since m0 was scraped.
func recordRelays(ctx context.Context, relays []*relayProc, m0 []metrics, w *window, tiers []tierResult) error {
	for i, r := range relays {
		m1, err := r.metrics(ctx)
		if err != nil {
			return err
		}
		t := &tiers[i]
		t.CPU = w.CPU[i]
		if at, ok := m1.max("xds_relay_upstream_last_update_timestamp_seconds"); ok {
			t.Received = time.Duration(at*1e9 - float64(w.Created))
		}
		t.UpstreamConnected, _ = m1.sum("xds_relay_upstream_connected", nil)
		r0, _ := m0[i].sum("xds_relay_responses_total", nil)
		r1, _ := m1.sum("xds_relay_responses_total", nil)
		t.Responses = r1 - r0
	}
	return nil
}

// finishLeaves ends the loadgens and returns each one's propagation of the
// change created at created, nil where it has none.
func finishLeaves(lgs []*loadgen, created int64) ([]*latencies, error) {
	var leaves []*latencies
	for _, lg := range lgs {
		s, err := lg.finish(2 * time.Minute)
		if err != nil {
			return nil, err
		}
		var l *latencies
		if c, ok := s.change(created); ok {
			l = &c
		}
		leaves = append(leaves, l)
	}
	return leaves, nil
}
