package downstream

import (
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// buildSotW turns a queued change into a response, or nil when the stream
// has nothing new to learn from it. Called with mu held.
func (st *stream) buildSotW(it item) *encoded {
	ts := st.types[it.view.TypeURL]
	if ts == nil {
		return nil
	}
	sw := &sotwBuilder{st: st, ts: ts, it: it, v: it.view}
	return sw.build()
}

// sotwBuilder builds one State-of-the-World response of a stream from a
// queued change. Used with the stream's mu held.
type sotwBuilder struct {
	st *stream
	ts *typeState
	it item
	v  *View

	// partial's selection: the resources and the errors the response carries.
	sel  []*Resource
	errs []*ResourceError
}

// build returns the response, or nil when the client has nothing new to
// learn from the change.
func (sw *sotwBuilder) build() *encoded {
	st, ts, it, v := sw.st, sw.ts, sw.it, sw.v
	var b *body
	if keying.FullState(v.TypeURL) {
		b = sw.fullState()
	} else {
		b = sw.partial()
		ts.noteHoldsGone(it)
	}
	if b == nil {
		// Nothing changed for the client; TTL heartbeats still go out.
		if b = sw.heartbeats(); b == nil {
			return nil
		}
		nonce := st.nextNonce()
		ts.lastNonce, ts.lastKeys = nonce, nil
		return newEncoded(b.bytes, sotwNonce, nonce)
	}
	return sw.record(b)
}

// record notes the response b about to be sent in the type's ACK, make
// before break and canary bookkeeping and returns it with a fresh nonce.
func (sw *sotwBuilder) record(b *body) *encoded {
	st, ts, it, v := sw.st, sw.ts, sw.it, sw.v
	nonce := st.nextNonce()
	ts.lastNonce, ts.lastKeys = nonce, b.keys
	ts.sentVersion, ts.nackedSent = b.version, false
	ts.sentOnce = true
	if keying.FullState(v.TypeURL) {
		ts.holdsBody, ts.holdsKeys, ts.fromElsewhere = b, b.keys, false
		if ts.wildcard && v.Known(keying.Wildcard, false) {
			delete(ts.unanswered, keying.Wildcard)
		}
	}
	if len(ts.unanswered) > 0 || len(ts.answeredWith) > 0 {
		ts.noteAnswered(it, b.keys)
	}
	ts.releaseAnswered() // also when the wildcard, just deleted, was all it held
	ts.lastView = v
	st.endWithholding(ts, v.TypeURL)
	if it.canary != nil {
		ts.rollout()
		ts.canary, ts.canaryNonce, ts.canarySent = it.canary, nonce, it.view.Seq
		ts.canaryDoubt = ts.rejecting
	}
	ts.sentAt = time.Time{}
	if len(it.names) > 0 && !v.Received.IsZero() {
		ts.sentAt = v.Received
	}
	return newEncoded(b.bytes, sotwNonce, nonce)
}

// forcedFull reports whether the change must be answered even when the
// client has its version: a newly subscribed name (or wildcard) that no
// response answered since.
func (sw *sotwBuilder) forcedFull() bool {
	ts, v := sw.ts, sw.v
	for n := range sw.it.force {
		_, named := ts.names[n]
		_, present := v.Resources[n]
		_, failed := ts.errorFor(v, n)
		if _, asked := ts.unanswered[n]; !asked {
			continue // answered since it was subscribed
		}
		if (named && (present || failed)) || (n == keying.Wildcard && ts.wildcard && v.Known(n, ts.fromElsewhere)) {
			return true
		}
	}
	return false
}

// fullState answers LDS/CDS: every subscribed resource in every response.
func (sw *sotwBuilder) fullState() *body {
	st, ts, v := sw.st, sw.ts, sw.v
	forced := sw.forcedFull()
	sel := sw.fullSelection()
	if ts.wildcard && !v.Known(keying.Wildcard, ts.fromElsewhere) {
		// The upstream has not answered the wildcard yet, or only by its
		// silence and the client brought config from elsewhere: it waits
		// rather than lose what it holds. (What this stream sent is kept by
		// losesNothing.)
		return st.withholdFull(ts, v, "unknown")
	}
	if ts.fromElsewhere && ts.staleIn(v) {
		return st.withholdFull(ts, v, "stale")
	}
	if !ts.wildcard && sel.present == 0 && sel.errors == 0 && !ts.sentOnce && !sel.gone {
		return nil // nothing known yet: let the client wait rather than think it is gone
	}
	b := sel.body
	if !ts.fromElsewhere && len(ts.withheldRefs) == 0 && b.covers(ts.holdsBody) {
		// The common change: the client loses nothing it holds, so nothing is
		// withheld (transitions.go, mbb.go).
		if ts.holdsVersion(b.version) && !forced {
			return nil
		}
		ts.withheldRefs = nil
		return b
	}
	return sw.fullKeeping(sel, b, forced)
}

// fullKeeping answers LDS/CDS when the response b of the selection sel
// may drop something the client holds: make before break keeps what the
// client still refers to, or holds the response back.
func (sw *sotwBuilder) fullKeeping(sel *namedState, b *body, forced bool) *body {
	st, ts, v := sw.st, sw.ts, sw.v
	kept, ok := st.withheldFull(ts, v, b)
	if !ok {
		// Make before break, where the stream cannot send what the client
		// holds as it holds it, or cannot read what refers to it: the
		// client keeps what it has until that is over.
		ts.withheldRefs = kept
		if ts.withheldRefs == nil {
			ts.withheldRefs = map[string]*Resource{} // (looked at again when referrers change)
		}
		return st.withholdFull(ts, v, "referenced")
	}
	keep := slices.Collect(maps.Values(kept))
	if len(keep) > 0 {
		// Make before break: what the client still refers to stays.
		slices.SortFunc(keep, byName)
		b = v.sotw(sel.key+withheldKey(keep), func() []*Resource {
			all := append(slices.Clone(sel.pick()), keep...)
			slices.SortFunc(all, byName)
			return all
		}, sel.errs, st.wrapFor(ts))
	}
	if ts.holdsVersion(b.version) && !forced {
		if len(keep) > 0 {
			// The client holds just this: what it keeps is looked at again
			// when what refers to it changes (releaseWithheld).
			ts.withheldRefs = kept
			st.noteWithheld(ts, v.TypeURL, "referenced")
		}
		return nil
	}
	if !ts.losesNothing(v, b) {
		return st.withholdFull(ts, v, "unknown")
	}
	ts.withheldRefs = kept
	if len(keep) > 0 {
		st.noteWithheld(ts, v.TypeURL, "referenced")
	}
	return b
}

// fullSelection returns what a full-state response of v carries for the
// stream: shared by every stream of the same interned subscription when it
// names resources plainly and canonically (View.namedFull), else the
// stream's own.
// Called with mu held.
func (sw *sotwBuilder) fullSelection() *namedState {
	st, ts, v := sw.st, sw.ts, sw.v
	w := st.wrapFor(ts)
	if !ts.wildcard && ts.set != nil && len(ts.denied) == 0 && !ts.hasGlobs && len(w.tp2) == 0 && len(ts.spelled) == 0 {
		return v.namedFull(ts.set, w.ttl)
	}
	var extra []*Resource // named resources outside the wildcard set
	gone := false
	for n := range ts.names {
		if _, denied := ts.denied[n]; denied {
			continue
		}
		r, ok := v.Resources[n]
		if ok && (!ts.wildcard || !r.InWildcard() || !r.plain()) {
			extra = append(extra, r)
		}
		if keying.IsGlob(n) {
			members := v.members(n)
			for _, m := range members {
				if !ts.wildcard || !m.InWildcard() {
					extra = append(extra, m) // (the wildcard set carries the others)
				}
			}
			gone = gone || len(members) == 0 && v.GlobAnswered(n) // the upstream's word: none
		} else if !ok && v.Known(n, false) {
			gone = true
		}
	}
	if ts.hasGlobs {
		slices.SortFunc(extra, byName)
		extra = slices.CompactFunc(extra, func(a, b *Resource) bool { return a.key() == b.key() })
	}
	// TP3: LDS/CDS responses with errors still carry every other resource.
	var errs []*ResourceError
	for n := range ts.names {
		if e, ok := ts.errorFor(v, n); ok {
			errs = append(errs, e)
		}
	}
	errs = ts.spellErrors(errs)
	sortErrors(errs)
	sel := &namedState{present: len(extra), errors: len(errs), gone: gone, errs: errs, key: "*", sel: extra}
	if w.ttl && v.wildcardTTL() {
		sel.key = "*\x00ttl"
	}
	if ts.wildcard && len(extra) == 0 {
		sel.wild = v
	} else {
		slices.SortFunc(extra, byName)
		sel.key = selectionKey(ts.wildcard, extra, w)
		if ts.wildcard {
			sel.wild = v
		}
	}
	sel.body = v.sotw(sel.key, sel.pick, errs, w)
	return sel
}

// noteHoldsGone records the subscribed names of a change that its View no longer
// has but the View last sent from did: the client keeps them (see
// holdsGone). Called with mu held, before lastView moves on.
func (ts *typeState) noteHoldsGone(it item) {
	for n := range it.names {
		if _, sub := ts.names[n]; !sub {
			continue
		}
		if _, now := it.view.Resources[n]; now {
			delete(ts.holdsGone, n)
			continue
		}
		if r, was := ts.lastView.resource(n); was {
			if ts.holdsGone == nil {
				ts.holdsGone = make(map[string]*Resource)
			}
			ts.holdsGone[n] = r
		}
	}
}

// noteAnswered records that a response to it carried keys: they are
// answered, and (RDS/EDS) the version a change that is not the names' own
// forced item answered them with is remembered (see answeredWith; also when
// a later change sent it again before the forced item came). Called with mu
// held.
func (ts *typeState) noteAnswered(it item, keys map[string]struct{}) {
	partial := !keying.FullState(it.view.TypeURL)
	for k := range keys {
		_, was := ts.unanswered[k]
		_, rec := ts.answeredWith[k]
		_, forced := it.force[k]
		if r, ok := it.view.Resources[k]; ok && (was || rec) && partial && !forced {
			if ts.answeredWith == nil {
				ts.answeredWith = make(map[string]string)
			}
			ts.answeredWith[k] = r.Version
		}
		delete(ts.unanswered, k)
	}
}

// releaseAnswered drops the maps of newly subscribed names once every name
// in them was answered: a map never shrinks, and a stream keeps its
// typeState for life (with 100 names, about 2 KiB a stream of a fleet).
// Called with mu held.
func (ts *typeState) releaseAnswered() {
	if len(ts.unanswered) == 0 {
		ts.unanswered = nil
	}
	if len(ts.answeredWith) == 0 {
		ts.answeredWith = nil
	}
}

// holdsVersion reports whether a SotW response at version is what the client has:
// the latest response sent (xDS: a NACKed version is not resent either), or,
// when that was NACKed, the one it still runs.
func (ts *typeState) holdsVersion(version string) bool {
	return version == ts.sentVersion || (ts.nackedSent && version == ts.ackedVersion)
}

// withheldKey extends a memo key with the resources a response keeps beyond its
// View (make before break).
func withheldKey(keep []*Resource) string {
	var sb strings.Builder
	sb.WriteString("\x00+")
	for _, r := range keep {
		sb.WriteString(r.key() + "\x00" + r.Version + "\x00")
	}
	return sb.String()
}

// partial answers the other types: the changed and the newly subscribed
// resources the stream watches.
func (sw *sotwBuilder) partial() *body {
	st, ts, it, v := sw.st, sw.ts, sw.it, sw.v
	for n := range it.names {
		sw.pick(n)
		delete(ts.brought, n) // it holds the View's version now: nothing to withhold
	}
	changed := len(sw.sel) + len(sw.errs)
	for n := range it.force {
		_, dup := it.names[n]
		_, asked := ts.unanswered[n]
		if ver, answered := ts.answeredWith[n]; answered {
			// Answered by a change queued before this, from an older View
			// perhaps: sent again if this View has another version (or an
			// error for it).
			delete(ts.answeredWith, n)
			r, ok := v.Resources[n]
			asked = asked || !ok || r.Version != ver
		}
		if asked && !dup && !sw.rollsBack(n) {
			sw.pick(n)
		}
	}
	for n := range ts.brought { // withheld by rollsBack: sent once confirmed
		if _, forced := it.force[n]; !forced && !v.Doubtful(n) {
			sw.pick(n)
			delete(ts.brought, n)
		}
	}
	sel, errs := sw.sel, ts.spellErrors(sw.errs)
	if len(sel) == 0 && len(errs) == 0 {
		return nil
	}
	asked := len(sel)+len(errs) > changed // the client asked for some of it
	slices.SortFunc(sel, byName)
	sel = slices.CompactFunc(sel, func(a, b *Resource) bool { return a.key() == b.key() })
	sortErrors(errs)
	w := st.wrapFor(ts)
	b := v.sotw(selectionKey(false, sel, w), func() []*Resource { return sel }, errs, w)
	if ts.holdsVersion(b.version) && !asked {
		return nil // the client has just this (a change it was sent with a request's answer)
	}
	return b
}

// rollsBack reports, and withholds, n when the client brought it from
// elsewhere (ts.brought: it holds some version of n) while no live upstream
// stream confirms the View's copy (View.Doubtful): it may be older than the
// client's. No rollback — the View that confirms it again notifies its
// watchers, and partial sends it then.
func (sw *sotwBuilder) rollsBack(n string) bool {
	ts, v := sw.ts, sw.v
	_, held := ts.brought[n]
	if _, cached := v.Resources[n]; !held || !cached || !v.Doubtful(n) {
		delete(ts.brought, n)
		return false
	}
	sw.st.noteWithheld(ts, v.TypeURL, "stale")
	return true
}

// pick adds what the stream watches of n to partial's selection.
func (sw *sotwBuilder) pick(n string) {
	ts, v := sw.ts, sw.v
	if !ts.watches(v, n) {
		return
	}
	if keying.IsGlob(n) {
		sw.sel = append(sw.sel, v.members(n)...) // a new glob subscription: all its members
		return
	}
	if e, ok := ts.denied[n]; ok {
		sw.errs = append(sw.errs, e)
	} else if r, ok := v.Resources[n]; ok {
		sw.sel = append(sw.sel, r)
	} else if e, ok := v.Errors[n]; ok {
		sw.errs = append(sw.errs, e)
	}
}

// heartbeats returns the response carrying the TTL heartbeats of the
// change that the client holds (xds.config.supports-resource-in-sotw), nil
// for none. It changes nothing the client holds: its version is the last
// one sent.
func (sw *sotwBuilder) heartbeats() *body {
	st, ts, it := sw.st, sw.ts, sw.it
	w := st.wrapFor(ts)
	if !w.ttl || len(it.beats) == 0 || ts.sentVersion == "" {
		return nil
	}
	held := ts.names
	if keying.FullState(it.view.TypeURL) {
		held = ts.holdsKeys
	}
	var rs []*Resource
	for n := range it.beats {
		_, holds := held[n]
		if r, ok := it.view.Resources[n]; ok && r.TTL > 0 && (holds || ts.subscribes(it.view, n)) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, byName)
	var sb strings.Builder
	sb.WriteString("\x00beat\x00" + ts.sentVersion + "\x00")
	for _, r := range rs {
		sb.WriteString(r.key() + "\x00")
	}
	return it.view.memoized(sb.String(), func() *body {
		var b []byte
		b = protowire.AppendTag(b, sotwVersionInfo, protowire.BytesType)
		b = protowire.AppendString(b, ts.sentVersion)
		for _, r := range rs {
			b = protowire.AppendTag(b, sotwResources, protowire.BytesType)
			b = protowire.AppendBytes(b, r.wrapper(formBeat|formTTL|formAny))
		}
		b = protowire.AppendTag(b, sotwTypeURL, protowire.BytesType)
		b = protowire.AppendString(b, it.view.TypeURL)
		return &body{bytes: b, version: ts.sentVersion, count: len(rs)}
	})
}

func sortErrors(errs []*ResourceError) {
	slices.SortFunc(errs, func(a, b *ResourceError) int { return strings.Compare(a.Name, b.Name) })
}

// anyGone reports whether v knows that one of names does not exist.
func anyGone(v *View, names map[string]struct{}) bool {
	for n := range names {
		if _, ok := v.Resources[n]; !ok && v.Gone(n) {
			return true
		}
	}
	return false
}

func byName(a, b *Resource) int { return strings.Compare(a.key(), b.key()) }

// selectionKey names a selection of a View for the response memo, marking
// how w wraps each resource.
func selectionKey(wildcard bool, rs []*Resource, w wrap) string {
	var sb strings.Builder
	if wildcard {
		sb.WriteString("*\x00")
	}
	for _, r := range rs {
		w.mark(&sb, r)
		sb.WriteString(r.key())
		sb.WriteByte(0)
	}
	return sb.String()
}
