package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFormatters(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{fmtDur(0), "0"},
		{fmtDur(500 * time.Nanosecond), "500ns"},
		{fmtDur(26700 * time.Nanosecond), "26.7 µs"},
		{fmtDur(246 * time.Millisecond), "246 ms"},
		{fmtDur(90800 * time.Microsecond), "90.8 ms"},
		{fmtDur(1160 * time.Millisecond), "1.16 s"},
		{fmtDur(95 * time.Second), "95.0 s"},
		{fmtBytes(99), "99 B"},
		{fmtBytes(15.6 * 1024), "15.6 KiB"},
		{fmtBytes(-2048), "-2.00 KiB"},
		{fmtBytes(2 << 30), "2.00 GiB"},
		{fmtRatio(5.8), "5.8×"},
		{fmtRatio(0.45), "0.45×"},
		{fmtRatio(0.021), "0.02×"},
		{fmtRatio(32), "32×"},
		{fmtCount(7), "7"},
		{fmtCount(10000), "10,000"},
		{fmtCount(100000), "100,000"},
		{fmtCount(-1234567), "-1,234,567"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func ms(f float64) *float64 { return &f }

// testSuite is a suite whose relay meets targets 1, 3, 4 and 6 and misses 2.
func testSuite() *suiteResult {
	const n = 1000
	lg := func(propMaxMS, syncMS float64) *loadgenSummary {
		s := &loadgenSummary{Clients: n, Synced: n, TimeToSyncAllMS: ms(syncMS)}
		s.Propagation.Samples, s.Propagation.Max = n, propMaxMS
		return s
	}
	run := func(name string, relay bool, proto string) runConfig {
		return runConfig{Name: name, Relay: relay, Protocol: proto, Clients: n, StreamsPerConn: 1, Change: true}
	}
	return &suiteResult{
		Machine:      machine{CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.26", Kernel: "6.1", Date: "2026-01-01"},
		Command:      "xds-bench --clients 1000",
		Clients:      n,
		Clusters:     100,
		PayloadBytes: 16000,
		ClusterBytes: 99,
		Limit: &limitResult{Conns: n, PayloadBytes: 16000, ConnectAll: 80 * time.Millisecond,
			Rounds: []time.Duration{20 * time.Millisecond}, Median: 20 * time.Millisecond, WriterCPU: 20 * time.Millisecond,
			WriterRSSBefore: 10 << 20, WriterRSSAfter: 11 << 20},
		Baseline: &runResult{Config: run("baseline-sotw", false, "sotw"), Loadgen: lg(500, 2000),
			ServerRSSBefore: 20 << 20, ServerRSSAfter: 20<<20 + 100<<20, DemocpConns: n,
			ChangeWindow: time.Second, WrittenAll: 450 * time.Millisecond, ServerCPU: 400 * time.Millisecond, ServerWrite: n * 16000},
		Relay: &runResult{Config: run("relay-sotw", true, "sotw"), Loadgen: lg(90, 1500),
			ServerRSSBefore: 20 << 20, ServerRSSAfter: 20<<20 + 30<<20, DemocpConns: 1, UpstreamConnected: 1,
			RelayHeapBefore: 1 << 20, RelayHeapAfter: 21 << 20,
			SyncServerCPU: 300 * time.Millisecond, SyncLoadgenCPU: 900 * time.Millisecond, RelayStack: 8 << 20, RelayGoroutines: 3001,
			ChangeWindow: time.Second, WrittenAll: 30 * time.Millisecond, ServerCPU: 200 * time.Millisecond,
			DemocpCPU: 10 * time.Millisecond, LoadgenCPU: 250 * time.Millisecond,
			ServerWrite: n * 16000, RelayResponseBytes: n * 16000},
		BaselineDelta: &runResult{Config: run("baseline-delta", false, "delta"), Loadgen: lg(50, 2000),
			ChangeWindow: time.Second, ServerCPU: 40 * time.Millisecond, ServerWrite: n * 370},
		RelayDelta: &runResult{Config: run("relay-delta", true, "delta"), Loadgen: lg(60, 1500),
			ChangeWindow: time.Second, ServerCPU: 40 * time.Millisecond, ServerWrite: n * 324, RelayResponseBytes: n * 263},
		Errors: map[string]string{},
	}
}

func TestRows(t *testing.T) {
	rows := testSuite().rows()
	byNumber := map[string]row{}
	for _, r := range rows {
		byNumber[strings.SplitN(r.Target, ".", 2)[0]] = r
	}
	for _, tc := range []struct {
		n                           string
		baseline, relay, limit, met string
	}{
		{"1", "500 ms", "90.0 ms", "20.0 ms", "yes"},                // 4.5× limit
		{"1b", "450 ms", "30.0 ms", "20.0 ms", "yes"},               // 1.5× limit
		{"2", "400 µs", "200 µs", "20.0 µs", "**no** (2× over)"},    // 0.5× baseline against 0.25×
		{"2b", "400 µs", "210 µs", "20.0 µs", "**no** (2.1× over)"}, // relay + democp
		{"3", "102 KiB", "30.7 KiB", "1.02 KiB", "yes"},             // 0.3× baseline
		{"3b", "—", "20.5 KiB", "—", "—"},                           // information
		{"4", "2.00 s", "1.50 s", "80.0 ms (TCP connect)", "yes"},   // 0.75× baseline
		{"4b", "1,000", "1 (upstream_connected 1)", "1", "yes"},     // one upstream connection
		{"5", "not run", "skipped (--streams 0)", "—", "—"},         // not run
		{"6a", "15.6 KiB", "15.6 KiB", "15.6 KiB (response)", "—"},  // information
		{"6", "370 B", "324 B", "99 B (cluster)", "yes"},            // 0.02× SotW
	} {
		r, ok := byNumber[tc.n]
		if !ok {
			t.Errorf("no row %s", tc.n)
			continue
		}
		if r.Baseline != tc.baseline || r.Relay != tc.relay || r.Limit != tc.limit || r.Met != tc.met {
			t.Errorf("row %s = %+v; want baseline %q relay %q limit %q met %q", tc.n, r, tc.baseline, tc.relay, tc.limit, tc.met)
		}
	}
	if r := byNumber["1"]; r.Ratio != "4.5× limit, 0.18× baseline" {
		t.Errorf("row 1 ratio %q", r.Ratio)
	}
}

func TestRowsMissingRuns(t *testing.T) {
	s := testSuite()
	s.Limit, s.Relay, s.RelayDelta = nil, nil, nil
	s.Streams = &runResult{Config: runConfig{Name: "relay-streams", Relay: true, Clients: 100000, StreamsPerConn: 10},
		Loadgen: &loadgenSummary{Clients: 100000, Synced: 100000}, ServerRSSBefore: 20 << 20, ServerRSSAfter: 3 << 30}
	for _, r := range s.rows() {
		switch {
		case strings.HasPrefix(r.Target, "5."):
			if !strings.Contains(r.Target, "100,000 streams on 10,000 connections") || r.Met != "**no** (1.5× over)" {
				t.Errorf("row 5 = %+v", r)
			}
		case strings.HasPrefix(r.Target, "6a."):
		default:
			if r.Relay != "—" || r.Met != "—" {
				t.Errorf("without relay runs: %+v", r)
			}
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	s := testSuite()
	s.Errors["relay-streams"] = "bench: loadgen exited\nwith status 1"
	s.ProfileTop = "flat  flat%\n 10ms 50% runtime.memmove"
	s.Profile = &runResult{Config: runConfig{Name: "relay-profile-delta", Relay: true, Protocol: "delta", Clients: 1000,
		Change: true, Profile: true}}
	var b bytes.Buffer
	if err := s.writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"- machine: 2 × Test CPU, Linux 6.1, go1.26, 2026-01-01\n",
		"- command: `xds-bench --clients 1000`\n",
		"| target | baseline | relay | limit | ratio | met? |\n| --- | --- | --- | --- | --- | --- |\n",
		"| relay-sotw | 1,000 | 1,000 | 1.50 s (300 ms, 900 ms) | 0 / 0 / 90.0 ms | 30.0 ms | 1.00 s | 200 ms (+ 10.0 ms), 250 ms |",
		"| limit (TCP) | 1,000 | 1,000 | 80.0 ms (connect) | rounds 20.0 ms | 20.0 ms |",
		"- relay-streams: bench: loadgen exited with status 1\n",
		"### Relay CPU profile during the change (delta)\n",
		"runtime.memmove\n```\n",
		"SotW 15.6 KiB, Delta 263 B.\n",
		"Relay memory per client once synced: RSS 30.7 KiB, Go heap in use 20.5 KiB, goroutine stacks 8.19 KiB (3.0 goroutines per client)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	checkTables(t, out)
}

// checkTables checks that every line of each Markdown table has as many
// cells as the table's header.
func checkTables(t *testing.T, out string) {
	t.Helper()
	header := -1
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "| ") {
			header = -1
			continue
		}
		n := strings.Count(l, " | ")
		if header < 0 {
			header = n
		} else if n != header {
			t.Errorf("table line with %d separators, its header %d: %s", n, header, l)
		}
	}
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.clients != 10000 || o.deltaClients != 10000 || !o.runs["limit"] || !o.runs["sotw"] || !o.runs["delta"] ||
		o.runs["streams"] || o.runs["profile"] || o.runs["grpc"] || o.streams != 100000 || o.streamsPerConn != 10 ||
		o.stuckClients != 5000 || o.healthyClients != 1000 || o.stuckFill != 0 {
		t.Errorf("defaults %+v", o)
	}
	o, err = parseFlags(strings.Fields("--clients 500 --runs streams,profile --delta-clients 7"), &stderr)
	if err != nil || o.clients != 500 || o.deltaClients != 7 || o.runs["sotw"] || !o.runs["streams"] || !o.runs["profile"] {
		t.Errorf("parsed %+v, %v", o, err)
	}
	o, err = parseFlags(strings.Fields("--runs shapes,delta --stuck-clients 50 --healthy-clients 10 --stuck-fill 3"), &stderr)
	if err != nil || o.stuckClients != 50 || o.healthyClients != 10 || o.stuckFill != 3 {
		t.Errorf("parsed %+v, %v", o, err)
	}
	for _, r := range []string{"limit", "sotw", "grpc", "stuck", "latency", "tiered", "delta"} {
		if !o.runs[r] {
			t.Errorf("--runs shapes,delta: no %s run", r)
		}
	}
	if o.runs["streams"] || o.runs["profile"] {
		t.Errorf("--runs shapes,delta: runs %v", o.runs)
	}
	for _, args := range []string{"--clients 0", "--runs bogus", "--streams 0", "--streams-per-conn 0", "--limit-rounds 0",
		"--sync-timeout 0s", "--delta-clients -1", "--profile-protocol rest", "extra", "--stuck-clients 0",
		"--healthy-clients 0", "--stuck-fill -1"} {
		if _, err := parseFlags(strings.Fields(args), &stderr); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
}
