package rest

import (
	"testing"

	"github.com/xds-relay/xds-relay/downstream"
)

// stateRollout is a rollout whose state the test sets.
type stateRollout struct{ state downstream.RolloutState }

func (r *stateRollout) State() downstream.RolloutState                            { return r.state }
func (r *stateRollout) Wait(downstream.Watcher) bool                              { return r.state == downstream.RolloutPending }
func (r *stateRollout) Report(downstream.Watcher, bool, string, []string, uint64) {}
func (r *stateRollout) Covers(*downstream.View) bool                              { return false }
func (r *stateRollout) Revert(v *downstream.View) *downstream.View                { return v }
func (r *stateRollout) Names() []string                                           { return nil }

// A rollout that starts after the one a poll waited on had resolved, before
// the poll looked again, is taken as it comes: a barrier holds its change
// back from the poll (it is answered from the released change), a canary's
// change goes with its verdict owed.
func TestPollNextRolloutAfterAResolvedBarrier(t *testing.T) {
	for _, canary := range []bool{false, true} {
		p := &poll{wake: make(chan struct{}, 1)}
		v0, v1, v2 := &downstream.View{Seq: 1}, &downstream.View{Seq: 2}, &downstream.View{Seq: 3}
		first, next := &stateRollout{}, &stateRollout{}
		p.Notify(v0, nil)
		p.NotifyRollout(v1, first, false)
		first.state = downstream.RolloutReleased
		p.NotifyRollout(v2, next, canary)
		want, wantCanary := v1, downstream.Rollout(nil)
		if canary {
			want, wantCanary = v2, next
		}
		if v, c := p.current(); v != want || c != wantCanary {
			t.Fatalf("canary=%v: the poll answers from View %d (carrying the next rollout: %v), want %d (%v)",
				canary, v.Seq, c != nil, want.Seq, wantCanary != nil)
		}
		next.state = downstream.RolloutReleased
		if v, _ := p.current(); v != v2 {
			t.Fatalf("canary=%v: after the next rollout's release the poll answers from View %d, want %d", canary, v.Seq, v2.Seq)
		}
	}
}
