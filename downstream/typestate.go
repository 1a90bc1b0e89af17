package downstream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// typeState is a stream's protocol state for one type, one part per
// concern. Guarded by stream.mu.
//
// One word, one meaning: what the client *holds* is what it has (Delta:
// holds; SotW LDS/CDS: holdsKeys); what the relay *withholds* is a removal
// it keeps back from the client (withheld, withheldRefs, withholding).
type typeState struct {
	counters *typeCounters // set at creation, shared by the server's streams

	subscription
	acks
	sotwState
	deltaState
	withholdState
	// *rolloutState is nil until the type takes part in a guarded rollout
	// (rollout): most streams never do, and it is a sixth of the state.
	*rolloutState
}

// subscription is what the client subscribes to. Its flags, and those of
// the SotW and Delta parts, come first and together: a stream holds a
// typeState per type, so padding counts.
type subscription struct {
	wildcard       bool
	legacyWildcard bool // SotW: no request with names yet, so empty means wildcard
	hasGlobs       bool // names holds an xdstp glob collection
	requested      bool // a request for this type was seen
	wildcardDenied bool // a refused wildcard (see denied)
	// fromElsewhere (SotW): the client's first request of the type carried
	// a version, so it holds config from an earlier stream (to this relay
	// or another), and nothing was sent to it here yet (transitions.go).
	fromElsewhere bool
	// wildPending (Delta): a wildcard subscription still waits for its
	// first answer.
	wildPending bool

	// names are the subscribed keys; a SotW stream's set is interned in
	// set and read-only (Delta streams own theirs).
	names map[string]struct{}
	set   *nameSet

	// denied holds the subscribed names the stream may not have, with the
	// error its responses carry; wildcardDenied a refused wildcard.
	denied map[string]*ResourceError

	// TP2: wrapped holds the subscribed keys that came as resource locators:
	// their variants are sent in a Resource with name and constraints.
	wrapped map[string]struct{}
	// spelled holds, for subscribed keys the client wrote otherwise (an
	// xdstp name not in canonical form), its spelling (spelling.go).
	spelled map[string]string
}

// acks is the ACK bookkeeping: what was sent, acknowledged or rejected.
type acks struct {
	lastNonce    string // the nonce of the latest response sent
	sentVersion  string
	ackedVersion string
	lastNACK     string
	// nackedSent: the latest response sent was NACKed, so the client
	// holds what it last ACKed (SotW).
	nackedSent bool
	// rejecting: the client's latest verdict on the type was a NACK.
	rejecting bool
	sentOnce  bool
	// updated is when a response was last sent, ACKed or NACKed (CSDS).
	updated time.Time
	sentAt  time.Time // upstream receipt of the change last sent; zero when not a change
	// ackedView (SotW) is the View of the latest response the client ACKed
	// and ackedKeys (LDS/CDS) the keys that response carried: what the
	// client holds, read by CSDS (set per ACK, never on the fan-out path).
	ackedView *View
	ackedKeys map[string]struct{}
}

// sotwState is what only a State-of-the-World stream keeps.
type sotwState struct {
	// staleDropped: names that stale requests dropped; if the next current
	// request names them again, they are sent again (the client dropped
	// them).
	staleDropped map[string]struct{}
	// lastKeys: the keys of the latest response sent with resources.
	lastKeys map[string]struct{}
	// unanswered: names newly subscribed (keying.Wildcard for the
	// wildcard) that no response carried since; only these make a forced
	// item send what the client has (a change queued before the
	// subscription's own item may have answered them already).
	unanswered map[string]struct{}
	// answeredWith (RDS/EDS): the version a change queued before a
	// subscription's own forced item answered a newly subscribed name with.
	// That change's View may be older than the forced item's: the name
	// changed between them while the stream did not watch it yet, so
	// nothing else brings the newer version; the forced item sends it then.
	answeredWith map[string]string

	// Transitions — never tell a client its config is gone when it isn't
	// (transitions.go); see also subscription.fromElsewhere.
	// holdsKeys (LDS/CDS): the keys of the last response sent, what the
	// client holds; shared, read-only.
	holdsKeys map[string]struct{}
	holdsBody *body // the response holdsKeys come from
	// holdsGone (RDS/EDS): subscribed names sent here that a later View sent
	// from no longer has, as the client still holds them — SotW cannot
	// remove them; the client drops them when it unsubscribes.
	holdsGone map[string]*Resource
	// brought (RDS/EDS): the names of the first request of a client from
	// elsewhere, each held in some version, not sent here yet (rollsBack).
	brought map[string]struct{}
}

// deltaState is what only a Delta stream keeps: what the client holds.
type deltaState struct {
	// holds is what the client holds, name → version.
	holds map[string]string
	// unwild are names the client held through a wildcard it dropped: they
	// are reported removed with the next response.
	unwild []string
	// initial: the names of initial_resource_versions not answered on this
	// stream yet (transitions.go).
	initial map[string]struct{}
	// holdsTP2 is the variant the client holds for each wrapped key.
	holdsTP2 map[string]*Resource
	// heldAs holds, for keys the client holds under a name it did not
	// spell (the upstream's spelling, spelling.go), that name.
	heldAs map[string]string
}

// withholdState is what the relay withholds from the client: removals
// withheld by make before break (mbb.go) and by transitions
// (transitions.go), and the Views they are judged against.
type withholdState struct {
	// withholding: why a removal is withheld now ("" for none), counted
	// once per episode.
	withholding string
	// withheld (Delta): names whose removal is withheld: looked at again
	// with every later change of the type.
	withheld map[string]struct{}
	// withheldRefs holds the resources whose removal is withheld because
	// the client still refers to them.
	withheldRefs map[string]*Resource
	// missingSince (SotW LDS/CDS): for each referenced key the client holds
	// from elsewhere and a full state lacks, when that removal arrived and
	// when the stream first judged it.
	missingSince map[string]missing

	// lastView is the View of the last response sent, latest the last View
	// queued, lastItem the View of the last queued change looked at.
	lastView *View
	latest   *View
	lastItem *View
}

// rolloutState is the type's part in guarded rollouts.
type rolloutState struct {
	// halted are rollouts this stream skipped: Views they cover are sent
	// reverted. canary is the rollout whose verdict the response with nonce
	// canaryNonce (or a later one) reports.
	halted      []Rollout
	canary      Rollout
	canaryNonce string
	// canaryWant is the View of the latest version of its rollout queued
	// for the canary, canarySent the View of the latest sent: a verdict
	// judges the rollout only once that version went out. canaryDoubt: the
	// client was rejecting the type when the canary's response went out, so
	// its NACK of that response may be about anything it carries (SotW: the
	// full state) and does not judge the rollout.
	canaryWant, canarySent uint64
	canaryDoubt            bool
	// canaryCarried (Delta) holds the rollout's names that the canary's
	// responses carried since its last verdict: the verdict is about those.
	canaryCarried map[string]struct{}
}

// rollout returns the type's part in guarded rollouts, creating it. Called
// with mu held.
func (ts *typeState) rollout() *rolloutState {
	if ts.rolloutState == nil {
		ts.rolloutState = &rolloutState{}
	}
	return ts.rolloutState
}

// sentCanary returns the View sequence of the latest canary response sent
// (canarySent), 0 for none. Called with mu held.
func (ts *typeState) sentCanary() uint64 {
	if ts.rolloutState == nil {
		return 0
	}
	return ts.canarySent
}

// typeCounters are a stream type's counters, looked up once (not per
// response and ACK on the fan-out path).
type typeCounters struct{ responses, bytes, acks prometheus.Counter }
