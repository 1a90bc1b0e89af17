package downstream

// RolloutState is where a guarded rollout stands.
type RolloutState int

const (
	// RolloutPending: the canaries have the change; the others wait.
	RolloutPending RolloutState = iota
	// RolloutReleased: everyone gets the change.
	RolloutReleased
	// RolloutHalted: the canaries rejected it; the others skip it and keep
	// the last accepted versions.
	RolloutHalted
)

// Rollout is a guarded rollout of one upstream change of one type, as a
// stream sees it. A non-canary stream holds a barrier item for it: nothing
// behind the barrier leaves before the rollout resolves, so holding one
// change back never reorders the others. If it halts, the barrier item is
// dropped and every later View of the type that still carries the halted
// versions is sent reverted (Revert), so the client keeps what it accepted.
type Rollout interface {
	// State reports where the rollout stands.
	State() RolloutState
	// Wait asks for w.Wake when the rollout resolves; false when it already
	// has.
	Wait(w Watcher) bool
	// Report records a canary's verdict on the response that carried the
	// change (ACK, or NACK with its reason). carried is the rollout's names
	// the judged responses carried (Delta: a verdict is about the resources
	// its responses carried); nil for all of them (a SotW LDS/CDS response
	// carries the whole state). sent is the Seq of the View the latest
	// judged response was built from: a verdict on a View older than the
	// latest version of the rollout meant for w is not about that version.
	Report(w Watcher, nack bool, reason string, carried []string, sent uint64)
	// Covers reports whether v carries the halted change (Views from the
	// change until the relay's correction).
	Covers(v *View) bool
	// Revert returns v with the rolled-out resources back at their accepted
	// versions.
	Revert(v *View) *View
	// Names returns the names the rollout changes.
	Names() []string
}

// ResolveBarrier settles a barrier of the rollout r for the watcher w.
// pending reports that r still withholds what is behind the barrier; w,
// unless nil, is woken when r resolves. Otherwise the barrier is gone and
// halted comes back with r appended if r halted: what the barrier withheld
// is then seen reverted (Reverted). A released barrier is an ordinary
// change.
func ResolveBarrier(r Rollout, w Watcher, halted []Rollout) (pending bool, _ []Rollout) {
	for {
		switch r.State() {
		case RolloutPending:
			if w == nil || r.Wait(w) {
				return true, halted
			}
		case RolloutHalted:
			return false, append(halted, r)
		default:
			return false, halted
		}
	}
}

// Reverted returns v as a watcher that skipped the halted rollouts sees it:
// each rollout that still covers v reverts what it rolled out. still are
// those rollouts: Views reach a watcher in order, so one that no longer
// covers v is done with.
func Reverted(v *View, halted []Rollout) (_ *View, still []Rollout) {
	out := v
	for _, r := range halted {
		if r.Covers(v) {
			out = r.Revert(out)
			still = append(still, r)
		}
	}
	return out, still
}

// Judge is implemented by Watchers that can tell whether they can judge a
// change of a type: a guarded rollout chooses its canaries among them (a
// canary that is already NACKing the type gives no verdict on the change).
type Judge interface {
	// CanJudge reports whether the watcher is connected and its latest
	// verdict on typeURL was not a NACK (an ACK, or no response yet).
	CanJudge(typeURL string) bool
}

// CanJudge implements Judge.
func (st *stream) CanJudge(typeURL string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	ts := st.types[typeURL]
	return ts == nil || (!ts.rejecting && !ts.nackedSent)
}
