package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lrs run prints both phases side by side, rates per second, and the
// cost of a report over the baseline.
func TestWriteLRS(t *testing.T) {
	s := testSuite()
	s.LRS = &lrsResult{Clients: 1000, Interval: time.Second, Phases: []lrsPhase{
		{Window: 10 * time.Second, RelayCPU: time.Second, RelayRSS: 100 << 20, RelayHeap: 40 << 20, RelayGoroutines: 2000},
		{Reporting: true, Window: 10 * time.Second, RelayCPU: 3 * time.Second, RelayRSS: 110 << 20, RelayHeap: 45 << 20,
			RelayGoroutines: 4000, LRSStreams: 1000, ReportsIn: 10000, ReportsOut: 10},
	}}
	var b bytes.Buffer
	if err := s.writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### Load reporting (issue 24): 1,000 clients reporting every 1.00 s through one relay",
		"| baseline: xDS only | 10.0 s | 1.00 s (0.100) | 100 MiB (40.0 MiB) | 2000 | 0 | 0 | 0.00 |",
		"| reporting | 10.0 s | 3.00 s (0.300) | 110 MiB (45.0 MiB) | 4000 | 1000 | 1000 | 1.00 |",
		"200 µs of CPU per client report",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestParseFlagsLRS(t *testing.T) {
	o, err := parseFlags([]string{"--runs", "lrs", "--clients", "500", "--lrs-window", "20s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.runs["lrs"] || len(o.runs) != 1 || o.lrsClients != 500 || o.lrsInterval != time.Second ||
		o.lrsWindow != 20*time.Second {
		t.Errorf("options = %+v", o)
	}
	if _, err := parseFlags([]string{"--lrs-interval", "10ms"}, io.Discard); err == nil {
		t.Error("--lrs-interval 10ms accepted")
	}
}

// The lrs run end to end with a handful of clients: both phases are
// measured, every client's LRS stream reaches the relay and the relay sends
// the sum upstream. Figures at this size mean nothing.
func TestLRSSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--bin", bin, "--clients", "5", "--clusters", "3", "--runs", "lrs", "--lrs-interval", "200ms",
		"--lrs-window", "1s", "--sync-timeout", "30s", "--log-dir", t.TempDir(), "--json", jsonOut}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "### Load reporting (issue 24): 5 clients reporting every 200 ms") {
		t.Errorf("report lacks the lrs section:\n%s", stdout.String())
	}
	checkTables(t, stdout.String())
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var s suiteResult
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.LRS == nil || len(s.LRS.Phases) != 2 {
		t.Fatalf("lrs run %+v", s.LRS)
	}
	if base, rep := s.LRS.Phases[0], s.LRS.Phases[1]; base.ReportsIn != 0 || rep.LRSStreams != 5 || rep.ReportsIn == 0 ||
		rep.ReportsOut == 0 || rep.Unforwarded != 0 {
		t.Errorf("phases %+v", s.LRS.Phases)
	}
}
