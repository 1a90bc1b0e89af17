package downstream

import "testing"

// A canary's verdict judges its rollout only once the latest version of it
// queued for the canary went out: a NACK of an older version, which a newer
// one joined the rollout to replace, does not halt the newer one (the
// oracle: such a halt kept the relay on the accepted version for good, the
// upstream's fix included).
func TestVerdictWaitsForTheNewerVersion(t *testing.T) {
	v := &View{Seq: 14, Changed: map[string]struct{}{"c18": {}}}
	if !changesAny(v, []string{"c3", "c18"}) || changesAny(v, []string{"c3"}) {
		t.Fatal("changesAny")
	}
	r := pendingRollout{}
	ts := &typeState{rolloutState: &rolloutState{canary: r, canaryNonce: "8", canarySent: 12, canaryWant: 14}}
	if ts.takeVerdict("8", true) != nil {
		t.Fatal("a NACK of the older version judged the rollout while the newer one was queued")
	}
	ts.canaryNonce, ts.canarySent = "10", 14 // the newer version went out
	if ts.takeVerdict("8", true) != nil {
		t.Fatal("a late answer to the older response judged the rollout")
	}
	if ts.takeVerdict("10", true) == nil {
		t.Fatal("the answer to the newer version did not judge the rollout")
	}
}

// A canary that was rejecting the type already (its latest verdict was a
// NACK) when its rollout's response went out does not judge the rollout by
// NACKing it: a SotW response carries the full state, and what it rejects
// may be what it rejected before (the oracle: such a NACK halted a good
// version, and the relay served an older, bad one for good). Its ACK does.
func TestVerdictOfARejectingCanary(t *testing.T) {
	r := pendingRollout{}
	ts := &typeState{rolloutState: &rolloutState{canary: r, canaryNonce: "4", canaryDoubt: true}}
	if ts.takeVerdict("4", true) != nil {
		t.Fatal("the NACK of a canary that was rejecting the type judged the rollout")
	}
	ts = &typeState{rolloutState: &rolloutState{canary: r, canaryNonce: "4", canaryDoubt: true}}
	if ts.takeVerdict("4", false) == nil {
		t.Fatal("the ACK of a canary that was rejecting the type did not judge the rollout")
	}
}
