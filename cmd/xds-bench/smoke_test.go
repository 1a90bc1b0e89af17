package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildBinaries builds xds-democp, xds-relay and xds-loadgen into a
// temporary directory and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "../xds-democp", "../xds-relay", "../xds-loadgen").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// Every fleet shape end to end with a handful of clients: the processes
// start, the clients sync, the changes are confirmed and the report has each
// shape's section. Figures at this size mean nothing; the plumbing is what is
// tested.
func TestShapesSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries (about a minute)")
	}
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--bin", bin, "--clients", "6", "--clusters", "10", "--runs", "grpc,stuck,latency,tiered",
		"--stuck-clients", "6", "--healthy-clients", "4", "--stuck-fill", "2", "--sync-timeout", "30s",
		"--log-dir", t.TempDir(), "--json", jsonOut}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"### Fleet shapes (issue 13)",
		"| relay-grpc (grpc) | 6 |",
		"| baseline-grpc (grpc) | 6 |",
		"| 4 healthy clients alone |",
		"| + 6 stuck clients synced (6 synced) |",
		"#### Latency during the fan-out of one change to 6 clients",
		"| admin: GET /debug/upstreams | fan-out |",
		"| tier-2b | 3 |",
		"| clients of tier-2a | — | p50 / p99 / max ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	checkTables(t, out)
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var s suiteResult
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.RelayGRPC == nil || s.RelayGRPC.Change == nil || s.RelayGRPC.Change.Samples != 6 || s.RelayGRPC.RelayResponses < 6 {
		t.Errorf("relay-grpc run %+v", s.RelayGRPC)
	}
	if st := s.Stuck; st == nil || st.StuckSynced != 6 || st.Missing != 0 || st.Alone == nil || st.WithStuck == nil ||
		st.WithStuck.Samples != 4 {
		t.Errorf("stuck run %+v", st)
	}
	if l := s.Latency; l == nil || len(l.Probes) != 3 || len(l.IdleProbes) != 3 || l.IdleProbes[0].Count == 0 {
		t.Errorf("latency run %+v", l)
	}
	if tr := s.Tiered; tr == nil || len(tr.Tiers) != 4 || len(tr.Leaves) != 2 || tr.Leaves[1] == nil ||
		tr.Tiers[3].Received <= 0 || tr.Tiers[1].UpstreamConnected != 1 {
		t.Errorf("tiered run %+v", tr)
	}
}

// The gRPC floor beside the relay and the TCP limit with a handful of
// clients of both shapes: the floor serves them, the change reaches them and
// the report has the floors table. Figures at this size mean nothing.
func TestFloorSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries (about a minute)")
	}
	bin := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--bin", bin, "--clients", "5", "--clusters", "10", "--runs", "limit,floor,sotw,grpc",
		"--limit-rounds", "1", "--sync-timeout", "30s", "--log-dir", t.TempDir(), "--json", jsonOut}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"### The relay above the floors (issue 26)",
		"| Envoy-like (wildcard CDS) | CPU of the change per client |",
		"| gRPC-like (CDS by name) | memory per client (RSS once synced) |",
		"| floor-sotw | 5 | 5 |",
		"| floor-grpc | 5 | 5 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	checkTables(t, out)
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var s suiteResult
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*runResult{s.FloorSotW, s.FloorGRPC} {
		if f == nil || f.Change == nil || f.Change.Samples != 5 || f.ServerWrite == 0 || f.ServerRSSAfter == 0 {
			t.Errorf("floor run %+v", f)
		}
	}
	for _, r := range s.floorRows() {
		if r.Relay == dash || r.Floor == dash { // ratios of CPU may be of zero ticks at this size
			t.Errorf("floors row without the relay or the floor: %+v", r)
		}
	}
}
