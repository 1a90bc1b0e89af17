package oracle

import (
	"testing"
	"time"
)

// TestProgressJudgesWhenTheClientsWereSampled: the differences fail the run
// only if clients sampled stallAfter after they last changed still show them.
// A long step between sampling and judging (the second round of next versions
// of a 10,000-cluster world on a loaded machine) is no time without progress:
// the clients moved on meanwhile, and the run failed with differences the
// relay's own record of their requests contradicted.
func TestProgressJudgesWhenTheClientsWereSampled(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := newProgress(t0, at(180))
	const diffs = "c4 Listener: holds {l4:70c17442b02aca71}, want {}"
	if p.stalled(diffs, at(0), at(0)) {
		t.Fatal("stalled at the first sample")
	}
	if p.stalled(diffs, at(1), at(25)) {
		t.Error("stalled: the clients were sampled 1 s after the last change, judged 25 s after it")
	}
	if !p.stalled(diffs, at(21), at(21)) {
		t.Error("not stalled: the clients sampled 21 s after the last change show the same differences")
	}

	// While the clients move, the wait ends at the limit.
	p = newProgress(t0, at(180))
	for s := 0; s < 180; s += 10 {
		if p.stalled(diffs+time.Duration(s).String(), at(s), at(s)) {
			t.Fatalf("stalled at %d s while the clients move", s)
		}
	}
	if !p.stalled("c5 Cluster: holds 10000, want 10007", at(181), at(181)) {
		t.Error("not stalled after the limit")
	}
}
