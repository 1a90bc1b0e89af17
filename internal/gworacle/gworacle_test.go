package gworacle_test

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/internal/gworacle"
)

var (
	seeds  = flag.Int("gworacle.seeds", 20, "schedules to run: seeds gworacle.seed .. gworacle.seed+N-1")
	first  = flag.Uint64("gworacle.seed", 1, "the first seed")
	steps  = flag.Int("gworacle.steps", 30, "steps per schedule")
	shrink = flag.Duration("gworacle.shrink", 2*time.Minute, "how long to shrink a failing schedule")
	logTo  = flag.String("gworacle.log", "", "write the relays' debug log of a failing schedule to this file")
	keep   = flag.String("gworacle.keep", "", "run only these steps of the schedule (comma-separated, as a shrunk schedule prints them)")
	all    = flag.Bool("gworacle.all", false, "run every seed of the range, past failures (a survey)")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGatewayOracle runs seeded schedules of the relay's gateway dialect and
// checks every response every data plane receives (see the package doc). A
// failure prints the seed, the schedule and the shortest failing schedule
// found; replay one with
//
//	go test ./internal/gworacle -run TestGatewayOracle -gworacle.seed N -gworacle.seeds 1 -gworacle.log /tmp/relay.log
//
// and a shrunk one with -gworacle.keep 1,11,12 (its step numbers).
func TestGatewayOracle(t *testing.T) {
	failed := 0
	for seed := *first; seed < *first+uint64(*seeds); seed++ {
		s := gworacle.Generate(seed, *steps)
		if *keep != "" {
			s = s.Keep(parseKeep(t, *keep))
		}
		if !runOne(t, s, true) {
			failed++
			if !*all {
				return
			}
		}
	}
	if *all {
		t.Logf("%d of %d seeds failed", failed, *seeds)
	}
}

// runOne runs a schedule and reports a failure (shrunk when shrinkIt).
func runOne(t *testing.T, s *gworacle.Schedule, shrinkIt bool) bool {
	t.Helper()
	log, buf := zap.NewNop(), &syncBuffer{}
	if *logTo != "" {
		log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), buf, zap.DebugLevel))
	}
	start := time.Now()
	err := gworacle.Execute(s, t.TempDir(), log)
	if *all {
		t.Logf("seed %d: %s: failed=%v (%v)", s.Seed, s.Opts, err != nil, time.Since(start).Round(time.Millisecond))
	}
	if err == nil {
		return true
	}
	if *logTo != "" {
		if werr := os.WriteFile(*logTo, buf.bytes(), 0o644); werr != nil {
			t.Log(werr)
		}
	}
	t.Errorf("seed %d failed: %v\nschedule:\n%s", s.Seed, err, s)
	if shrinkIt && *shrink > 0 {
		short, serr := gworacle.Shrink(s, err, t.TempDir(), 3, *shrink)
		t.Errorf("shortest failing schedule found (%d of %d steps):\n%s%v", len(short.Steps), len(s.Steps), short, serr)
	}
	return false
}

func parseKeep(t *testing.T, s string) []int {
	var at []int
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("-gworacle.keep: %v", err)
		}
		at = append(at, i)
	}
	return at
}

// regressions are shrunk schedules that once failed (seed, steps kept), each
// with what it found. Runs are not deterministic, so each is run a few times.
var regressions = []struct {
	seed  uint64
	keep  []int
	found string
}{
	{19, []int{15, 16, 21, 22, 23, 24, 27, 28}, "Delta: a restarted relay's warm cache sent its older versions over newer ones a data plane brought, before the upstream answered the type"},
}

// TestGatewayOracleRegressions replays the regression table.
func TestGatewayOracleRegressions(t *testing.T) {
	for _, reg := range regressions {
		s := gworacle.Generate(reg.seed, *steps).Keep(reg.keep)
		for range 3 {
			if !runOne(t, s, false) {
				t.Errorf("regression (%s) is back", reg.found)
				break
			}
		}
	}
}

// directed are schedules written by hand for a failure the seeds reach too
// rarely, each with what it found.
var directed = []struct {
	found string
	sched *gworacle.Schedule
}{
	{"SotW: after an outage without a change, the group asked the upstream with its cached version, was answered with silence and held a data plane that came with an older version for good",
		&gworacle.Schedule{Seed: 1, Opts: gworacle.Options{Replicas: 2, Clusters: 1}, Steps: []gworacle.Step{
			{Op: gworacle.OpJoin, DP: "dp0", Brought: -1, At: 0},
			{Op: gworacle.OpPublish, N: 2, At: 1},
			{Op: gworacle.OpPause, N: 200, At: 2},
			{Op: gworacle.OpUpstreamDown, At: 3},
			{Op: gworacle.OpJoin, DP: "dp1", Brought: 1, At: 4}, // the control plane comes back at quiescence
		}}},
}

// TestGatewayOracleDirected runs the directed schedules.
func TestGatewayOracleDirected(t *testing.T) {
	for _, d := range directed {
		if !runOne(t, d.sched, false) {
			t.Errorf("directed schedule (%s) fails", d.found)
		}
	}
}

// syncBuffer is a zap sink safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Sync() error { return nil }

func (s *syncBuffer) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
