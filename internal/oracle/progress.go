package oracle

import "time"

// stallAfter is how long the clients may show no progress towards the
// upstream's state before the run fails.
const stallAfter = 20 * time.Second

// progress watches the clients converge once the schedule is over: the run
// fails when they differ from the upstream's state as they did stallAfter
// before, or when the limit comes while they still move (a large world on a
// busy machine).
type progress struct {
	last     string    // the differences last sampled
	deadline time.Time // when the same differences fail the run
	limit    time.Time
}

func newProgress(start, limit time.Time) *progress {
	return &progress{deadline: start.Add(stallAfter), limit: limit}
}

// stalled notes the differences diffs, sampled from the clients at or after
// sampled, and reports at now whether they fail the run. The sample, not the
// judgement, must come after the deadline: a step between the two (the next
// versions of a large world published on a busy machine) may take seconds,
// while the clients move on.
func (p *progress) stalled(diffs string, sampled, now time.Time) bool {
	if diffs != p.last {
		p.last, p.deadline = diffs, earlier(now.Add(stallAfter), p.limit)
	}
	return sampled.After(p.deadline)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
