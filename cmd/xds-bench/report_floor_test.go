package main

import (
	"strings"
	"testing"
	"time"
)

// The floors table: relay / gRPC floor and relay / TCP limit of each figure,
// judged against issue 26's targets; a shape without its relay run is left out.
func TestFloorRows(t *testing.T) {
	s := testSuite() // relay: 200 ms CPU, 30 MiB; limit: 20 ms CPU and last reader, 1 MiB
	s.Relay.Change = &latencies{Samples: 1000, P50: 60, Max: 90}
	s.FloorSotW = &runResult{Config: runConfig{Name: "floor-sotw", Floor: true, Protocol: "sotw", Mode: modeEnvoy,
		Clients: 1000, StreamsPerConn: 1, Change: true}, Change: &latencies{Samples: 1000, P50: 40, Max: 60},
		ServerRSSBefore: 20 << 20, ServerRSSAfter: 40 << 20, ChangeWindow: time.Second, ServerCPU: 160 * time.Millisecond}
	s.RelayDelta = nil // its rows are checked below
	rows := s.floorRows()
	if len(rows) != 4 {
		t.Fatalf("%d rows, want the 4 of the Envoy-like shape: %+v", len(rows), rows)
	}
	for i, want := range []floorRow{
		{Relay: "200 µs", Floor: "160 µs", Limit: "20.0 µs", VsFloor: "1.2×", VsLimit: "10×",
			Target: "≤ 1.5× floor, ≤ 5× limit", Met: "**no** (2× over limit)"},
		{Relay: "90.0 ms", Floor: "60.0 ms", Limit: "20.0 ms", VsFloor: "1.5×", VsLimit: "4.5×",
			Target: "≤ 3× limit", Met: "**no** (1.5× over limit)"},
		{Relay: "60.0 ms", Floor: "40.0 ms", Limit: dash, VsFloor: "1.5×", VsLimit: dash, Target: dash, Met: dash},
		{Relay: "30.7 KiB", Floor: "20.5 KiB", Limit: "1.02 KiB", VsFloor: "1.5×", VsLimit: "30×",
			Target: "≤ 32.0 KiB", Met: "yes"},
	} {
		want.Shape, want.Figure = rows[i].Shape, rows[i].Figure
		if rows[i] != want {
			t.Errorf("row %d (%s) = %+v\nwant %+v", i, rows[i].Figure, rows[i], want)
		}
	}
	var b strings.Builder
	s.writeFloors(&b)
	checkTables(t, b.String())

	// Delta clients: beside the SotW floor and limit, CPU against the SotW relay's 200 µs.
	s.RelayDelta = &runResult{Config: runConfig{Name: "relay-delta", Relay: true, Protocol: "delta", Mode: modeEnvoy,
		Clients: 1000, StreamsPerConn: 1, Change: true}, Change: &latencies{Samples: 1000, P50: 20, Max: 30},
		ServerRSSBefore: 20 << 20, ServerRSSAfter: 50 << 20, ChangeWindow: time.Second, ServerCPU: 50 * time.Millisecond}
	rows = s.floorRows()
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 4 Envoy-like and 4 Delta: %+v", len(rows), rows)
	}
	if d := rows[4]; d.Relay != "50.0 µs" || d.VsFloor != "0.31×" || d.VsLimit != "2.5×" ||
		d.Met != "0.25× the SotW relay's 200 µs" {
		t.Errorf("Delta CPU row = %+v", d)
	}
	if m := rows[7]; m.Relay != "30.7 KiB" || m.Target != dash || m.Met != dash {
		t.Errorf("Delta memory row = %+v", m)
	}

	s.Relay, s.Limit, s.RelayDelta = nil, nil, nil
	if rows := s.floorRows(); len(rows) != 4 || rows[0].Relay != dash || rows[0].VsFloor != dash {
		t.Errorf("floor alone: %+v", rows)
	}
	s.FloorSotW = nil
	if rows := s.floorRows(); rows != nil {
		t.Errorf("no floor, no limit: %+v", rows)
	}
}
