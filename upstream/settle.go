package upstream

import (
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// What does a response answer? SotW carries no link between a response and
// the request it answers, and neither protocol says "I have nothing more to
// send". Two questions depend on it.
//
// Is a response the wildcard's full set? A server that pushed a change before
// it read the relay's request adding "*" (the request is then stale and
// ignored) sent the older, named subscription's resources; taking that for
// the full set would tell every wildcard client that the rest is gone. Delta
// has the same race. So a response completes the wildcard only when that is
// certain:
//
//   - the stream's first request of the type carried "*" (and it stayed):
//     every subscription the server ever applied on this stream had it;
//   - or the response carries a resource outside the named subscription,
//     and not one dropped from it on this stream while the wildcard was
//     unproven (the response may answer a request that still named it):
//     the server applied "*" to it.
//
// Silence proves nothing: a server may be slow past any timer, and
// go-control-plane in ADS mode never answers a request mixing "*" with names
// it lacks. When the server says nothing more for the settle time after the
// relay's last word (its request adding "*", or its ACK of the last
// response, which carries "*"), the wildcard settles, once, as not found
// yet (Update.Unfound): the relay may answer a client that holds nothing
// with what it has, never tell anyone that a name is gone. Later responses
// are the full set only once one of the above proves it.
//
// Has the server answered a type on a new stream? A Delta server told the
// versions the relay holds sends nothing when nothing changed. A type counts
// as answered at its first response, or when the server said nothing for the
// settle time after the type's first request. Until then the relay's cached
// data of the type is not confirmed (relay: View.Unconfirmed).
//
// Both end in a Settle Update when no response settled them.
//
// Is a response a glob collection's set? On SotW, as for the wildcard, when
// it was in the stream's first request, or when it brings a member only
// the glob covers (proveGlobs). An empty collection subscribed mid-stream
// has no member to prove it: once the server said nothing more for the
// settle time, a new stream asks.

// DefaultSettle is how long the server may say nothing after the relay's
// last request before an unproven wildcard, or a type's first request on a
// stream, counts as answered.
const DefaultSettle = 250 * time.Millisecond

// rejectedLocked records that a response of st's type was NACKed: no wait
// settles the type or its wildcard until a valid response answers it. A
// server sends again only on a change, so when the NACKed response leaves a
// set unanswered on this stream — the type's first answer, an unproven
// wildcard, a glob collection — a new stream asks for it once the
// does-not-exist wait has passed (resync.go). Config.OnNACK counts it.
// Called with mu held.
func (c *Client) rejectedLocked(typeURL string, st *typeState) {
	st.rejected, st.settleAt = true, time.Time{}
	if c.cfg.OnNACK != nil {
		c.cfg.OnNACK(typeURL)
	}
	if !st.answered || st.wildcard() && !st.wildSure || c.unprovenGlobLocked(st) {
		c.resyncLaterLocked(ResyncRejected)
	}
}

// unprovenGlobLocked reports whether st subscribes a glob collection that no
// response answered on this stream. Called with mu held.
func (c *Client) unprovenGlobLocked(st *typeState) bool {
	answered := st.globs // SotW: answered whole by every response
	if c.mode == ModeDelta {
		answered = st.globsAnswered
	}
	for n := range st.names {
		if _, ok := answered[n]; keying.IsGlob(n) && !ok {
			return true
		}
	}
	return false
}

// answered records a response of st's type carrying names and reports
// whether it is the wildcard's full set, settling the wildcard when it
// proves it. Called with mu held.
func (c *Client) answered(st *typeState, names []string) bool {
	st.answered, st.refetch, st.rejected = true, false, false
	if !st.wildcard() {
		st.settleAt = time.Time{}
		return false
	}
	if !st.wildSure {
		for _, n := range names {
			if _, dropped := st.dropped[n]; !st.namedLocked(n) && !dropped {
				st.wildSure = true // only the wildcard brings an unnamed resource
				break
			}
		}
	}
	if st.wildSure {
		st.settleAt, st.dropped = time.Time{}, nil
		return !st.forgottenUnderWildcard()
	}
	if !st.wildSettled {
		c.armSettleLocked(st)
	}
	return false
}

// StillWhole reports whether a Delta response of typeURL that was the
// wildcard's full set when received (Update.Complete) still is as the
// Handler applies it: the Handler runs outside the client's lock, and
// meanwhile the relay may have dropped the wildcard, forgotten what the
// server thinks it holds (evicted), and subscribed the wildcard again. The
// server's changes then apply to a set the relay no longer holds, so they
// prove nothing whole until its answer to the new subscription. A SotW
// response is the set itself: true.
func (c *Client) StillWhole(typeURL string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.types[typeURL]
	if c.mode != ModeDelta || st == nil {
		return true
	}
	return st.wildSure && !st.forgottenUnderWildcard()
}

// namedLocked reports whether the subscription names n explicitly (TP2
// locators included).
func (st *typeState) namedLocked(n string) bool {
	if _, ok := st.names[n]; ok {
		return true
	}
	for k := range st.names {
		if name, _ := keying.SplitSubscriptionKey(k); name == n {
			return true
		}
	}
	return false
}

// forgetKeyName forgets that the stream knows the name of the TP2 key k,
// which was just unsubscribed, unless it still asks for that name (plainly,
// with other parameters, or by its glob): a later full-state response
// without the name says nothing of it. Called with mu held.
func (st *typeState) forgetKeyName(k string) {
	name, _ := keying.SplitSubscriptionKey(k)
	if _, byGlob := st.names[keying.GlobOf(name)]; !byGlob && !st.namedLocked(name) {
		delete(st.known, name)
	}
}

// armSettleLocked (re)starts the settle wait of st and wakes the sender,
// which keeps the timer. Called with mu held.
func (c *Client) armSettleLocked(st *typeState) {
	if st.rejected {
		return // a NACKed response is no answer, and silence after it none either
	}
	d := c.cfg.Settle
	if d <= 0 {
		d = DefaultSettle
	}
	st.settleAt = time.Now().Add(d)
	c.notify()
}

// nextSettle returns how long until the earliest pending settle, false when
// none is pending.
func (c *Client) nextSettle() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, st := range c.types {
		if !st.settleAt.IsZero() && (first.IsZero() || st.settleAt.Before(first)) {
			first = st.settleAt
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(time.Until(first), 0), true
}

// settleDue settles the types and wildcards whose wait has passed and tells
// the Handler, a wildcard's set as not found yet — and has a new stream ask
// for the wildcard's set. Called from the stream's sender.
func (c *Client) settleDue(server string, delta bool) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	c.mu.Lock()
	now := time.Now()
	var due []string
	unfound := map[string]bool{}
	for t, st := range c.types {
		if st.settleAt.IsZero() || st.settleAt.After(now) {
			continue
		}
		st.settleAt = time.Time{}
		if !delta && keying.FullState(t) && !st.globSettled && c.unprovenGlobLocked(st) {
			// SotW: only a member proves a glob collection subscribed
			// mid-stream, so an empty one never is: a new stream, whose
			// first request carries it, asks for its set (resync.go).
			st.globSettled = true
			c.resyncLocked(ResyncGlob)
		}
		if st.refetch {
			// The server answers a request with no version: its silence
			// proves no wildcard. But it says nothing of named resources it
			// lacks, so silence still ends the wait for the type's first
			// answer on the stream.
			if !st.answered {
				st.answered = true
				due = append(due, t)
			}
			continue
		}
		settled := !st.answered
		st.answered = true
		if st.wildcard() && !st.wildSure && !st.wildSettled {
			// What was dropped before the server's silence is no longer in
			// flight: from now on it proves the wildcard like any other
			// unnamed resource.
			st.wildSettled, settled, st.dropped = true, true, nil
			// Silence is not the server's word on the wildcard's set: a new
			// stream, whose first request carries "*", asks for it
			// (resync.go).
			c.resyncLocked(ResyncWildcard)
		}
		if settled {
			due = append(due, t)
			unfound[t] = st.wildcard() // even a wildcard of the first request: silence is no answer
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		c.log.Debug("settled: the server sent nothing more", zap.String("type", t), zap.Bool("wildcard", unfound[t]))
		_ = c.handleLocked(Update{Event: Settle, Server: server, TypeURL: t, Unfound: unfound[t], Delta: delta})
	}
}

// forgottenUnderWildcard reports whether the wildcard's set lacks members the
// server thinks the relay holds: forgotten names it covers, to be confirmed
// (confirmForgotten) or confirming. Called with mu held.
func (st *typeState) forgottenUnderWildcard() bool {
	if len(st.confirming) > 0 {
		return true
	}
	for n := range st.forget {
		if !keying.HasParams(n) {
			return true
		}
	}
	return false
}

// confirmingLocked notes the forgotten names a request confirms.
func (st *typeState) confirmingLocked(names []string) {
	if st.confirming == nil {
		st.confirming = make(map[string]struct{})
	}
	for _, n := range names {
		st.confirming[n] = struct{}{}
	}
}

// confirmedLocked ends the confirmation of the names a Delta response
// carries or removes.
func (st *typeState) confirmedLocked(resp *discoveryv3.DeltaDiscoveryResponse) {
	if len(st.confirming) == 0 {
		return
	}
	for _, r := range resp.GetResources() {
		delete(st.confirming, r.GetName())
	}
	for _, n := range resp.GetRemovedResources() {
		delete(st.confirming, n)
	}
}
