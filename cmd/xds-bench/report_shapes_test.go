package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// testShapes adds the fleet-shape runs to testSuite: gRPC-like clients at
// 1.2× the Envoy-like CPU and 2× its last client, a stuck run that meets the
// time but not the memory target, probes over 20 ms, and a tiered run.
func testShapes() *suiteResult {
	s := testSuite()
	s.Relay.Change = &latencies{Samples: 1000, P50: 50, P99: 85, Max: 90}
	s.Relay.RelayResponses = 1000
	s.RelayGRPC = &runResult{Config: runConfig{Name: "relay-grpc", Relay: true, Protocol: "sotw", Mode: modeGRPC,
		Clients: 1000, StreamsPerConn: 1, Change: true},
		Change: &latencies{Samples: 1000, P50: 100, P99: 170, Max: 180}, ChangeWindow: time.Second,
		ServerCPU: 240 * time.Millisecond, ServerWrite: 1000 * 16000, RelayResponses: 1003, DemocpConns: 1,
		UpstreamConnected: 1}
	s.BaselineGRPC = &runResult{Config: runConfig{Name: "baseline-grpc", Protocol: "sotw", Mode: modeGRPC,
		Clients: 1000, StreamsPerConn: 1, Change: true},
		Change: &latencies{Samples: 1000, P50: 400, P99: 700, Max: 800}, ChangeWindow: time.Second,
		ServerCPU: 500 * time.Millisecond, ServerWrite: 1000 * 16000, DemocpConns: 1000}
	s.Stuck = &stuckResult{Stuck: 5000, Healthy: 1000, ResponseBytes: 16000, FillChanges: 10,
		Alone:       &latencies{Samples: 1000, P50: 20, P99: 40, Max: 50},
		WithStuck:   &latencies{Samples: 1000, P50: 22, P99: 45, Max: 55},
		Healthy0:    relayMemory{RSS: 100 << 20, Heap: 40 << 20},
		Synced:      relayMemory{RSS: 400 << 20, Heap: 150 << 20},
		Held:        relayMemory{RSS: 400<<20 + 5000*32000, Heap: 150<<20 + 5000*8000},
		StuckSynced: 5000, FillWritten: 300 << 20, RelayCPUAlone: 30 * time.Millisecond,
		RelayCPUWithStuck: 35 * time.Millisecond}
	s.Latency = &runResult{Config: runConfig{Name: "relay-latency", Relay: true, Protocol: "sotw", Mode: modeEnvoy,
		Clients: 1000, StreamsPerConn: 1, Change: true, Probe: true}, ChangeWindow: time.Second,
		Probes: []probeStats{
			{Name: "new client", Count: 40, P50: 3 * time.Millisecond, P90: 8 * time.Millisecond, P99: 30 * time.Millisecond,
				Max: 30 * time.Millisecond},
			{Name: "admin: GET /readyz", Count: 50, Errors: 1, P50: time.Millisecond, P99: 5 * time.Millisecond,
				Max: 5 * time.Millisecond, LastError: "refused"},
			{Name: "admin: GET /debug/upstreams", Count: 4, P50: 190 * time.Millisecond, P99: 2650 * time.Millisecond,
				Max: 2650 * time.Millisecond},
		},
		IdleProbes: []probeStats{{Name: "new client", Count: 90, P50: 2 * time.Millisecond, Max: 4 * time.Millisecond}}}
	s.Tiered = &tieredResult{Clients: 1000, ChangeWindow: time.Second, LoadgenCPU: 300 * time.Millisecond,
		Tiers: []tierResult{
			{Name: "democp", Serves: 1, RSS: 20 << 20},
			{Name: "tier-1", Serves: 2, Received: 2 * time.Millisecond, CPU: 10 * time.Millisecond, RSS: 30 << 20,
				UpstreamConnected: 1, Responses: 2},
			{Name: "tier-2a", Serves: 500, Received: 5 * time.Millisecond, CPU: 100 * time.Millisecond, RSS: 60 << 20,
				UpstreamConnected: 1, Responses: 500},
			{Name: "tier-2b", Serves: 500, Received: 6 * time.Millisecond, CPU: 110 * time.Millisecond, RSS: 61 << 20,
				UpstreamConnected: 1, Responses: 500},
		},
		Leaves: []*latencies{{Samples: 500, P50: 40, P99: 80, Max: 90}, nil}}
	return s
}

func TestShapeRows(t *testing.T) {
	rows := testShapes().shapeRows()
	for _, tc := range []struct {
		prefix                      string
		measured, against, ratio, m string
	}{
		{"7.", "240 ms", "200 ms (Envoy-like)", "1.2× Envoy-like", "yes"},
		{"7b.", "180 ms", "90.0 ms (Envoy-like)", "2× Envoy-like", "**no** (1.3× over)"},
		{"8.", "55.0 ms", "50.0 ms (alone)", "1.1× alone", "yes"},
		{"8b.", "31.2 KiB", "15.6 KiB (response)", "2× response", "**no** (2× over)"},
		{"9.", "30.0 ms (p99 30.0 ms, 40 probes)", "20.0 ms", "1.5×", "**no** (1.5× over)"},
		{"9c.", "2.65 s (p99 2.65 s, 4 probes)", "20.0 ms", "132×", "**no** (132× over)"},
		{"9b.", "5.00 ms (p99 5.00 ms, 50 probes)", "20.0 ms", "0.25×", "**no** (1 errors)"},
		{"10. relay-sotw", "0", "0", "—", "yes"},
		{"10. relay-grpc", "3", "0", "—", "**no** (3 duplicates)"},
		{"10b.", "1 (upstream_connected 1)", "1", "—", "yes"},
	} {
		var r *shapeRow
		for i := range rows {
			if strings.HasPrefix(rows[i].Target, tc.prefix+" ") || strings.HasPrefix(rows[i].Target, tc.prefix+":") {
				r = &rows[i]
				break
			}
		}
		if r == nil {
			t.Errorf("no row %q in %+v", tc.prefix, rows)
			continue
		}
		if r.Measured != tc.measured || r.Against != tc.against || r.Ratio != tc.ratio || r.Met != tc.m {
			t.Errorf("row %s = %+v; want measured %q against %q ratio %q met %q", tc.prefix, *r, tc.measured,
				tc.against, tc.ratio, tc.m)
		}
	}
}

// A stuck run whose healthy clients never all had the change says how many did.
func TestShapeRowsStuckMissing(t *testing.T) {
	s := testShapes()
	s.Stuck.Missing, s.Stuck.WithStuck = 400, &latencies{Samples: 600, Max: 59000}
	found := 0
	for _, r := range s.shapeRows() {
		if strings.HasPrefix(r.Target, "8. ") {
			if r.Measured != "600 of 1,000 had it after 60.0 s" || r.Met != "**no**" {
				t.Errorf("row 8 = %+v", r)
			}
			found++
		}
		if strings.HasPrefix(r.Target, "8b. ") {
			if r.Met != "— (the change did not go out)" {
				t.Errorf("row 8b = %+v", r)
			}
			found++
		}
	}
	if found != 2 {
		t.Errorf("%d of rows 8 and 8b", found)
	}
}

func TestWriteShapes(t *testing.T) {
	var b bytes.Buffer
	if err := testShapes().writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### Fleet shapes (issue 13)\n\n| target | measured | against | ratio | met? |\n",
		"| relay-grpc (grpc) | 1,000 | 240 ms (240 µs) | 100 ms / 170 ms / 180 ms | 15.6 KiB | 1.00 | 1 |\n",
		"| baseline-grpc (grpc) | 1,000 | 500 ms (500 µs) | 400 ms / 700 ms / 800 ms | 15.6 KiB | — | 1,000 |\n",
		"| 1,000 healthy clients alone | 20.0 ms / 40.0 ms / 50.0 ms | 30.0 ms | 100 MiB (heap 40.0 MiB) |\n",
		"| + 10 changes to fill their windows, then the change | 22.0 ms / 45.0 ms / 55.0 ms | 35.0 ms |",
		"Per stuck client: 61.4 KiB RSS (heap 22.5 KiB) once connected and synced; 31.2 KiB RSS (heap 7.81 KiB) more " +
			"once stuck, against one coalesced response of 15.6 KiB. Over the fill changes the relay wrote 300 MiB (916 MiB",
		"| new client | fan-out | 40 | 0 | 3.00 ms | 8.00 ms | 30.0 ms | 30.0 ms |\n",
		"| new client | idle, 1 s before | 90 | 0 | 2.00 ms |",
		"admin: GET /readyz, last error: refused\n",
		"| tier-2a | 500 | 5.00 ms | 100 ms | 60.0 MiB | 1 | 500 |\n",
		"| clients of tier-2a | — | p50 / p99 / max 40.0 ms / 80.0 ms / 90.0 ms | 300 ms (both loadgens) |",
		"| clients of tier-2b | — | p50 / p99 / max — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	checkTables(t, out)
}

// Without any shape run there is no shapes section.
func TestWriteShapesNone(t *testing.T) {
	var b bytes.Buffer
	if err := testSuite().writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Fleet shapes") {
		t.Errorf("shapes section without shape runs:\n%s", b.String())
	}
}

func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	got := summarize("p", samples)
	want := probeStats{Name: "p", Count: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond,
		P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if e := summarize("none", nil); e != (probeStats{Name: "none"}) {
		t.Errorf("summarize(nil) = %+v", e)
	}
}
