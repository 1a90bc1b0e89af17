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
	srv, err := startServers(ctx, e, "tiered", true, modeEnvoy)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	relays := []*relayProc{srv.relay}
	for _, n := range []string{"a", "b"} {
		r, err := startRelay(ctx, e, "tiered-relay-2"+n, srv.relay.addr)
		if err != nil {
			return nil, err
		}
		defer r.stop()
		relays = append(relays, r)
	}
	leaves := []int{clients - clients/2, clients / 2}
	var lgs []*loadgen
	for i, n := range leaves {
		lg, err := startClients(e, fmt.Sprintf("tiered-loadgen-2%c", 'a'+i), relays[1+i].addr, n, 1, modeEnvoy, "sotw")
		if err != nil {
			return nil, err
		}
		defer lg.stopQuietly() // a no-op once finished
		lgs = append(lgs, lg)
	}
	e.logf("tiered: %d clients connecting to two tier-2 relays", clients)
	for i, lg := range lgs {
		if err := waitSynced(ctx, e, fmt.Sprintf("tiered (tier-2%c)", 'a'+i), lg, leaves[i]); err != nil {
			return nil, err
		}
	}

	// Processes by index: the relays (tier 1, 2a, 2b), democp, the loadgens.
	var pids []int
	for _, r := range relays {
		pids = append(pids, r.c.pid())
	}
	pids = append(pids, srv.democp.pid(), lgs[0].c.pid(), lgs[1].c.pid())
	synced, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return nil, err
	}
	res.Tiers = []tierResult{
		{Name: "democp", Serves: 1, RSS: synced[3].RSS},
		{Name: "tier-1", Serves: 2, RSS: synced[0].RSS},
		{Name: "tier-2a", Serves: leaves[0], RSS: synced[1].RSS},
		{Name: "tier-2b", Serves: leaves[1], RSS: synced[2].RSS},
	}
	tierOf := []int{1, 2, 3} // relay i is res.Tiers[tierOf[i]]

	m0 := make([]metrics, len(relays))
	before := func() error {
		for i, r := range relays {
			if m0[i], err = r.metrics(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	w, err := measureWindow(ctx, e, windowSpec{name: "tiered", controlAddr: srv.controlAddr, pids: pids,
		expect: []expect{{lgs[0], leaves[0]}, {lgs[1], leaves[1]}}, confirmWithin: 3 * time.Minute, beforeChange: before})
	if err != nil {
		return nil, err
	}
	if w.Missing > 0 {
		return nil, fmt.Errorf("bench: tiered: %d of %d clients did not report the change within 3m", w.Missing, clients)
	}
	res.ChangeWindow = w.Length
	res.Tiers[0].CPU = w.CPU[3]
	res.LoadgenCPU = w.CPU[4] + w.CPU[5]
	for i, r := range relays {
		m1, err := r.metrics(ctx)
		if err != nil {
			return nil, err
		}
		t := &res.Tiers[tierOf[i]]
		t.CPU = w.CPU[i]
		if at, ok := m1.max("xds_relay_upstream_last_update_timestamp_seconds"); ok {
			t.Received = time.Duration(at*1e9 - float64(w.Created))
		}
		t.UpstreamConnected, _ = m1.sum("xds_relay_upstream_connected", nil)
		r0, _ := m0[i].sum("xds_relay_responses_total", nil)
		r1, _ := m1.sum("xds_relay_responses_total", nil)
		t.Responses = r1 - r0
	}
	for _, lg := range lgs {
		s, err := lg.finish(2 * time.Minute)
		if err != nil {
			return nil, err
		}
		var l *latencies
		if c, ok := s.change(w.Created); ok {
			l = &c
		}
		res.Leaves = append(res.Leaves, l)
	}
	e.logf("tiered: done")
	return res, nil
}
