package downstream

import (
	"slices"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/keying"
)

// buildDelta turns a queued change into an incremental response: the
// resources whose version the client does not hold, and the removals.
// Called with mu held.
func (st *stream) buildDelta(it item) *encoded {
	ts := st.types[it.view.TypeURL]
	if ts == nil || ts.holds == nil {
		return nil
	}
	b := &deltaBuilder{st: st, ts: ts, it: it, v: it.view}
	return b.build()
}

// deltaBuilder builds one incremental response of a stream from a queued
// change. Used with the stream's mu held.
type deltaBuilder struct {
	st *stream
	ts *typeState
	it item
	v  *View

	send    []*Resource
	removed []string
	errs    []*ResourceError
	swapped []removal // TP2: variants replaced by another variant sent now
	refs    *refSet   // what the client refers to of the type, once read (withholdReferenced)
}

// build looks at every name the change concerns and encodes the response,
// nil when the client has nothing to learn from it.
func (b *deltaBuilder) build() *encoded {
	b.considerChange()
	b.removeUnwild()
	answerWildcard := b.answerWildcard()
	ts, v := b.ts, b.v
	w := b.st.wrapFor(ts)
	beats := heartbeats(b.it, ts, w, b.send)
	if len(b.send) == 0 && len(b.removed) == 0 && len(b.errs) == 0 && !answerWildcard && len(beats) == 0 {
		return nil
	}
	rms := b.removals()
	sortErrors(b.errs)
	send, beats, rms, errs := ts.respell(b.send, beats, rms, b.errs)
	body := v.delta(send, beats, rms, errs, w)
	if len(rms) > 0 || len(b.send) > 0 {
		b.st.endWithholding(ts, v.TypeURL)
	}
	return b.record(body)
}

// considerChange looks at the names the change carries, the names newly
// subscribed and the names whose removal was withheld.
func (b *deltaBuilder) considerChange() {
	it, ts := b.it, b.ts
	for n := range it.names {
		b.consider(n, false)
	}
	for n := range it.force {
		if n == keying.Wildcard {
			continue
		}
		if _, dup := it.names[n]; !dup {
			b.consider(n, true)
		}
	}
	for n := range ts.withheld {
		_, named := it.names[n]
		_, forced := it.force[n]
		if _, held := ts.holds[n]; !held {
			delete(ts.withheld, n) // settled meanwhile
		} else if !named && !forced {
			b.consider(n, false)
		}
	}
}

// sendIfNew sends r unless the client holds its version, or brought
// another one from elsewhere while the View's copy is unconfirmed (rollBack).
func (b *deltaBuilder) sendIfNew(r *Resource) {
	ts := b.ts
	k := r.key()
	if b.rollsBack(k, r) {
		return
	}
	delete(ts.initial, k)
	delete(ts.withheldRefs, k)
	if ts.holds[k] == r.Version {
		return
	}
	ts.holds[k] = r.Version
	b.send = append(b.send, r)
	if _, tp2 := ts.wrapped[k]; tp2 {
		if old := ts.holdsTP2[k]; old != nil && old.Constraints != r.Constraints {
			b.swapped = append(b.swapped, old.removal(k))
		}
		if ts.holdsTP2 == nil {
			ts.holdsTP2 = make(map[string]*Resource)
		}
		ts.holdsTP2[k] = r.Root()
	}
}

// rollsBack reports, and withholds, r when the client brought another
// version of k from elsewhere (initial_resource_versions) and no live
// upstream stream confirms the View's copy (View.Doubtful): it may be older
// than the client's. No rollback — k is looked at again with every later change, and
// sent once the upstream confirms it.
func (b *deltaBuilder) rollsBack(k string, r *Resource) bool {
	ts := b.ts
	if _, brought := ts.initial[k]; !brought || ts.holds[k] == r.Version || !b.v.Doubtful(k) {
		return false
	}
	if ts.withheld == nil {
		ts.withheld = make(map[string]struct{})
	}
	ts.withheld[k] = struct{}{}
	b.st.noteWithheld(ts, b.v.TypeURL, "stale")
	return true
}

// drop tells the client n is gone.
func (b *deltaBuilder) drop(n string) {
	delete(b.ts.holds, n)
	delete(b.ts.initial, n)
	b.removed = append(b.removed, n)
}

// consider decides what the response says of n: forced when n was newly
// subscribed (or unsubscribed while the wildcard may cover it).
func (b *deltaBuilder) consider(n string, forced bool) {
	ts, v := b.ts, b.v
	if keying.IsGlob(n) {
		if forced {
			for _, r := range v.members(n) { // a new glob subscription
				b.sendIfNew(r)
			}
		}
		b.dropGoneMembers(n)
		return
	}
	r, present := v.Resources[n]
	named := ts.watches(v, n)
	// The wildcard covers what the default servers list, never a
	// subscription with TP2 parameters.
	plainKey := !keying.HasParams(n)
	covered := plainKey && ts.wildcard && (!present || r.InWildcard())
	switch {
	case named || (covered && present):
		b.considerWatched(n, r, present, named)
	case forced && ts.wildcard && plainKey:
		// xDS: unsubscribing a name the wildcard may cover is answered
		// by the resource or by its removal.
		b.removed = append(b.removed, n)
	case covered && ofDefault(n):
		if _, held := ts.holds[n]; held && b.st.checkRemoval(ts, v, n) && !b.withholdReferenced(n) {
			b.drop(n)
		}
	case ts.wildcard && plainKey:
		// Another authority's name, held through the wildcard alone: the
		// default servers' whole set no longer lists it (Resource.Listed),
		// or no longer has it at all — their word on what the wildcard
		// covers, not on the name.
		if _, held := ts.holds[n]; held && b.unlisted(n) && !b.withholdReferenced(n) {
			b.drop(n)
		}
	}
}

// ofDefault reports whether n is a name of the default servers' authority.
func ofDefault(n string) bool {
	auth, _ := keying.Authority(n)
	return auth == ""
}

// unlisted reports whether the View's wildcard set, whole and confirmed,
// leaves out n, another authority's name the client holds through the
// wildcard; if not, the removal is withheld (looked at again with every
// later change).
func (b *deltaBuilder) unlisted(n string) bool {
	ts, v := b.ts, b.v
	if v.Complete && !v.Stale(keying.Wildcard) {
		delete(ts.withheld, n)
		return true
	}
	reason := "unknown"
	if v.Stale(keying.Wildcard) {
		reason = "stale"
	}
	if ts.withheld == nil {
		ts.withheld = make(map[string]struct{})
	}
	ts.withheld[n] = struct{}{}
	b.st.noteWithheld(ts, v.TypeURL, reason)
	return false
}

// dropGoneMembers tells the client which members of glob it holds are gone:
// those missing from the glob's set once the upstream answered it
// (View.Gone). Not only those it brought from elsewhere
// (initial_resource_versions): a View that never had one (a stream moved to
// its node's own scope) does not list it as changed.
func (b *deltaBuilder) dropGoneMembers(glob string) {
	st, ts, v := b.st, b.ts, b.v
	if !v.GlobAnswered(glob) {
		return
	}
	for k := range ts.holds {
		if _, present := v.Resources[k]; !present && keying.GlobOf(k) == glob &&
			st.checkRemoval(ts, v, k) && !b.withholdReferenced(k) {
			b.drop(k)
		}
	}
}

// considerWatched decides what the response says of n, which the stream
// watches by name or which the wildcard covers and v has (r).
func (b *deltaBuilder) considerWatched(n string, r *Resource, present, named bool) {
	st, ts, v := b.st, b.ts, b.v
	if e, failed := ts.errorFor(v, n); failed && named && (!present || ts.denied[n] != nil) {
		if _, held := ts.holds[n]; held && e.NotFound() && b.withholdReferenced(n) {
			return // make before break: the client still refers to it
		}
		// TP3: the error, and for NOT_FOUND also a removal. A transient
		// error (UNAVAILABLE) leaves the client its copy.
		b.errs = append(b.errs, e)
		if e.dataError() {
			delete(ts.holds, n)
		}
		if e.NotFound() {
			b.drop(n)
		}
	} else if present {
		b.sendIfNew(r)
	} else if _, held := ts.holds[n]; held {
		if st.checkRemoval(ts, v, n) && !b.withholdReferenced(n) {
			b.drop(n)
		}
	} else if named && v.Known(n, false) && !b.foundSince(n) {
		b.removed = append(b.removed, n) // it does not exist, or is not found yet: the client holds none of it
	}
}

// foundSince reports whether a View of the type queued after the item's has
// n: the relay has heard of it since, so "it does not exist" would be stale
// news, and the item of that View sends it.
func (b *deltaBuilder) foundSince(n string) bool {
	latest := b.ts.latest
	if latest == nil || latest == b.v {
		return false
	}
	_, ok := latest.Resources[n]
	return ok
}

// removeUnwild removes what only a dropped wildcard covered — unless the
// wildcard is back and still covers it: its answer resends it.
func (b *deltaBuilder) removeUnwild() {
	ts, v := b.ts, b.v
	if len(ts.unwild) == 0 || !hasKey(b.it.force, keying.Wildcard) {
		return
	}
	for _, n := range ts.unwild {
		if r, ok := v.Resources[n]; ok && ts.wildcard && r.InWildcard() {
			continue
		}
		b.removed = append(b.removed, n)
	}
	ts.unwild = nil
}

// answerWildcard sends the wildcard set to a client that subscribed to it
// (or still waits for its first answer) and removes what it no longer
// covers; it reports whether the response answers a pending wildcard. A set
// only settled by the upstream's silence (View.Unfound) is sent, but stays
// pending: it removes nothing (View.Gone), and the upstream's word on the
// whole set is yet to come.
func (b *deltaBuilder) answerWildcard() bool {
	st, ts, v := b.st, b.ts, b.v
	if !ts.wildcard || !v.Known(keying.Wildcard, false) || (!ts.wildPending && !hasKey(b.it.force, keying.Wildcard)) {
		return false
	}
	for _, r := range v.wildcard() {
		b.sendIfNew(r)
	}
	for n := range ts.holds {
		r, present := v.Resources[n]
		if present && (r.InWildcard() || ofDefault(n) || keying.HasParams(n)) || ts.watches(v, n) {
			continue
		}
		// Another authority's name the wildcard alone gave, cached or not:
		// the default servers' whole set is the word on it.
		if (ofDefault(n) && st.checkRemoval(ts, v, n) || !ofDefault(n) && b.unlisted(n)) && !b.withholdReferenced(n) {
			b.drop(n)
		}
	}
	if !v.Complete {
		return false
	}
	answer := ts.wildPending
	ts.wildPending = false
	return answer
}

// removals sorts what the response sends and returns its removals: never a
// name both sent and removed, and for a TP2 subscriber the variant it holds.
func (b *deltaBuilder) removals() []removal {
	ts := b.ts
	slices.SortFunc(b.send, byName)
	slices.Sort(b.removed)
	b.removed = slices.Compact(b.removed)
	// Never a name both sent and removed in one response.
	b.removed = slices.DeleteFunc(b.removed, func(n string) bool {
		_, sent := slices.BinarySearchFunc(b.send, n, func(r *Resource, n string) int { return strings.Compare(r.key(), n) })
		return sent
	})
	rms := b.swapped
	for _, k := range b.removed {
		if old := ts.holdsTP2[k]; old != nil {
			rms = append(rms, old.removal(k)) // TP2: the variant the client holds
			delete(ts.holdsTP2, k)
			continue
		}
		n, _ := keying.SplitSubscriptionKey(k)
		rms = append(rms, removal{key: k, name: n})
	}
	return rms
}

// record notes the response body about to be sent in the type's ACK and
// canary bookkeeping and returns it with a fresh nonce.
func (b *deltaBuilder) record(body *body) *encoded {
	st, ts, it, v := b.st, b.ts, b.it, b.v
	ts.lastView = v
	nonce := st.nextNonce()
	ts.lastNonce = nonce
	ts.sentVersion = body.version
	if it.canary != nil {
		ts.rollout()
		// Its verdict is about what its responses carried: a Delta client
		// NACKs the resources of a response, not what it holds.
		if ts.canary != it.canary || ts.canaryCarried == nil {
			ts.canaryCarried = make(map[string]struct{})
		}
		for _, n := range it.canary.Names() {
			if _, ok := slices.BinarySearchFunc(b.send, n, func(r *Resource, n string) int { return strings.Compare(r.key(), n) }); ok {
				ts.canaryCarried[n] = struct{}{}
			}
		}
		ts.canary, ts.canaryNonce, ts.canarySent = it.canary, nonce, it.view.Seq
		ts.canaryDoubt = ts.rejecting
	}
	ts.sentAt = time.Time{}
	if len(it.names) > 0 && !v.Received.IsZero() {
		ts.sentAt = v.Received
	}
	return newEncoded(body.bytes, deltaNonce, nonce)
}

// heartbeats returns the TTL heartbeats of it the Delta client of ts gets:
// those of resources it holds at their current version, not sent anyway.
// Called with mu held.
func heartbeats(it item, ts *typeState, w wrap, send []*Resource) []*Resource {
	if !w.ttl || len(it.beats) == 0 {
		return nil
	}
	var out []*Resource
	for n := range it.beats {
		r, ok := it.view.Resources[n]
		if !ok || r.TTL == 0 || ts.holds[n] != r.Version || slices.Contains(send, r) {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, byName)
	return out
}

func hasKey(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
}
