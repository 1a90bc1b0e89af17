package downstream

import (
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// Make before break (xDS "eventual consistency considerations"): a client
// must never hold a route to a cluster it no longer has, nor a cluster
// without its endpoints. An upstream that sends a snapshot type by type —
// go-control-plane's ordered ADS sends CDS before RDS — breaks first: the
// CDS without c2 arrives before the RDS that moves the route from c2 to c3.
// So on an ADS stream, where one stream carries every type in order, a
// removal of a Cluster, RouteConfiguration or ClusterLoadAssignment (SotW
// LDS/CDS omission, Delta removal) is withheld while the client holds a
// resource that refers to it (keying.References), and sent once what the
// client holds no longer does. The held resource is sent as the client holds
// it. Opaque types keep the upstream's order only.
//
// An upstream whose own state refers to a resource it deleted keeps the
// client holding that resource until the reference goes: the client keeps
// working, and xds_relay_removals_held_total{reason="referenced"} counts it.
// A route the stream cannot read (the client brought it from elsewhere)
// may refer to anything, and holds the full state back whole, but only
// while a listener the client holds names it (or may: one the stream cannot
// read either) — clients hold a route for their listeners only — and, like
// every such wait, for as long as the relay waits for the upstream's word,
// or that word waits in the stream's queue (waitsForUnread).
// One the client brought from elsewhere, which the stream cannot send as the
// client holds it, is held only while the reference may be about to go
// (mayLeave): during the reconnect, while a queued change of the referrer
// drops it, shortly (referrerGrace) after the removal arrived, or, while no
// live upstream confirms the relay's copy of the referrer, for as long as
// the relay waits for the upstream's word (Options.AnswerWait): otherwise
// waiting for a reference nobody may ever resolve would withhold every
// later update of the type.

// refs returns what r refers to (keying.References), parsed once per stored
// variant.
func (r *Resource) refs(typeURL string) keying.Refs {
	root := r.Root()
	root.refsOnce.Do(func() { root.refsOf = keying.References(typeURL, anyValue(root.Any)) })
	return root.refsOf
}

// refsState is the parsed references of a stored variant.
type refsState struct {
	refsOnce sync.Once
	refsOf   keying.Refs
}

// anyValue returns the value field of a serialized google.protobuf.Any.
func anyValue(b []byte) []byte {
	var val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		if num == 2 && typ == protowire.BytesType {
			val, _ = protowire.ConsumeBytes(b)
		}
		b = b[m:]
	}
	return val
}

// refSet is what the client of an ADS stream holds refers to, of one type:
// the names, and whether it holds a referrer the stream cannot read yet (the
// client brought it from elsewhere and the cache has not got it), which may
// refer to any name. Of the names, leaving are those a change queued for the
// client drops a reference to, and doubtful those referred to by a resource
// whose copy in the relay's latest View no live upstream confirms (see
// mayLeave). Read once for a whole response or pass: a check per name of
// everything the client holds would cost names × holdings, minutes for a
// fleet of 10,000 clusters.
type refSet struct {
	names             map[string]bool
	unknown           bool
	leaving, doubtful map[string]bool
	// unread holds, by type, the keys of the referrers the stream cannot
	// read ("": it cannot tell which either).
	unread map[string][]string
}

// addUnread records a referrer of type rt at key that the stream cannot read.
func (rs *refSet) addUnread(rt, key string) {
	rs.unknown = true
	if rs.unread == nil {
		rs.unread = make(map[string][]string)
	}
	rs.unread[rt] = append(rs.unread[rt], key)
}

// has reports whether what the client holds may refer to key.
func (rs refSet) has(key string) bool {
	name, _ := keying.SplitSubscriptionKey(key) // references are by name
	return rs.unknown || rs.names[name]
}

// references returns what the client of this ADS stream holds refers to of
// typeURL; nothing on a per-type stream, whose other types travel
// elsewhere. Called with mu held.
func (st *stream) references(typeURL string) refSet {
	var rs refSet
	if st.typeURL != "" {
		return rs
	}
	// What the client refers to of routes, read once if needed (unreadableMatters).
	routed := sync.OnceValue(func() refSet { return st.references(keying.RouteType) })
	for _, rt := range keying.Referrers(typeURL) {
		rts := st.types[rt]
		if rts == nil {
			rs.unknown = rs.unknown || st.inGrace() // it may not have asked for what it holds yet
			continue
		}
		rts.eachClientResource(func(k string, r *Resource) bool {
			if r == nil {
				if st.unreadableMatters(rt, k, routed) {
					rs.addUnread(rt, k)
				}
				return true
			}
			rs.add(rts, rt, typeURL, r)
			return true
		})
	}
	return rs
}

// add notes what r, a resource of rt the client holds (rts), refers to of
// typeURL, and whether those references may be about to go: a change of r
// queued for the client drops them (the upstream broke first — a
// snapshot's CDS without the cluster came before its RDS that moves the
// route — and r's next response mends it), or the relay's latest copy of r
// is one no live upstream confirms (View.Doubtful: the upstream may have
// moved it off them already, and its answer, which notifies the stream,
// tells).
func (rs *refSet) add(rts *typeState, rt, typeURL string, r *Resource) {
	names := r.refs(rt)[typeURL]
	rs.names = mark(rs.names, names...)
	latest := rts.latest
	if len(names) == 0 || latest == nil {
		return
	}
	if latest.Doubtful(r.key()) {
		rs.doubtful = mark(rs.doubtful, names...)
	}
	if latest == rts.lastView {
		return // nothing queued since the last response
	}
	next, ok := latest.Resources[r.key()]
	if !ok || next.Root() == r.Root() {
		return
	}
	kept := mark(nil, next.refs(rt)[typeURL]...)
	for _, n := range names {
		if !kept[n] {
			rs.leaving = mark(rs.leaving, n)
		}
	}
}

// mark adds names to set, made when nil, and returns it.
func mark(set map[string]bool, names ...string) map[string]bool {
	if set == nil {
		set = make(map[string]bool, len(names))
	}
	for _, n := range names {
		set[n] = true
	}
	return set
}

// unreadableMatters reports whether a resource of rt the client holds at
// key, which the stream cannot read, may refer to what make before break
// keeps. A route routes nothing unless a listener (or scoped route) the
// client holds names it — Envoy and gRPC hold a route for those only — so
// one that nothing the client holds names, as far as the stream can read
// it, does not count: waiting on it would withhold the type for as long as
// the client holds it. routed returns what the client refers to of routes.
// Called with mu held.
func (st *stream) unreadableMatters(rt, key string, routed func() refSet) bool {
	return rt != keying.RouteType || key == "" || routed().has(key)
}

// eachClientResource calls f with the key of each resource the client
// holds of the type and the resource, as far as the stream knows (what it
// sent last, and what it withholds), until f returns false; with nil for
// one the stream cannot read (see clientResource), and an empty key when
// the stream does not know the keys either. Called with mu held.
func (ts *typeState) eachClientResource(f func(string, *Resource) bool) {
	if ts.rejectedAll() {
		return
	}
	visit := func(k string) bool {
		if r, ok := ts.withheldRefs[k]; ok && r != nil {
			return f(k, r)
		}
		return f(k, ts.clientResource(k))
	}
	switch {
	case ts.holds != nil: // Delta: what the client holds
		for k := range ts.holds {
			if !visit(k) {
				return
			}
		}
	case ts.holdsKeys != nil: // SotW LDS/CDS: the last full state sent
		for k := range ts.holdsKeys {
			if ts.subscribesKey(k) && !visit(k) {
				return
			}
		}
	case ts.fromElsewhere && ts.wildcard:
		f("", nil) // SotW LDS/CDS from elsewhere, nothing sent yet: unknown
	default: // SotW: each subscribed name as last sent (or from elsewhere)
		for k := range ts.names {
			if r, ok := ts.holdsGone[k]; ok {
				if !f(k, r) {
					return
				}
				continue
			}
			if _, sent := ts.lastView.resource(k); !sent && !ts.fromElsewhere {
				continue // never sent here: the client does not hold it
			}
			if !visit(k) {
				return
			}
		}
	}
}

// resource returns the resource of v (nil: none) at key.
func (v *View) resource(key string) (*Resource, bool) {
	if v == nil {
		return nil, false
	}
	r, ok := v.Resources[key]
	return r, ok
}

// clientResource returns the resource the client holds at key as far as the
// stream can tell, nil when unknown. SotW: as this stream sent it — unknown
// while it withholds the View's copy from a client that brought its own
// (ts.brought). Delta: from the last View sent from or the latest queued, at
// the version the client holds. Called with mu held.
func (ts *typeState) clientResource(key string) *Resource {
	if ts.holds == nil {
		if _, own := ts.brought[key]; own {
			return nil // the last View sent from has a copy the client was not sent
		}
		v := ts.lastView
		if ts.nackedSent {
			// It rejected the last: it holds what it ACKed here, or (nil)
			// what it brought, never the copy it rejected.
			v = ts.ackedView
		}
		r, _ := v.resource(key)
		return r
	}
	for _, v := range []*View{ts.lastView, ts.latest} {
		if v == nil {
			continue
		}
		r, ok := v.Resources[key]
		if !ok {
			continue
		}
		if ver, held := ts.holds[key]; ts.holds != nil && (!held || ver != r.Version) {
			continue
		}
		return r
	}
	return nil
}

// rejectedAll reports whether a SotW client that came with nothing of the
// type rejected every response of it: it holds none. Called with mu held.
func (ts *typeState) rejectedAll() bool {
	return ts.holds == nil && ts.nackedSent && ts.ackedView == nil && ts.ackedVersion == ""
}

// keepAccepted: a SotW client rejected the last response, so the copies
// make before break keeps are the ones it last ACKed; where it ACKed none
// here, the stream cannot read what it holds (nil): keeping the rejected
// copy would have it rejected again with every later response.
// Called with mu held.
func (ts *typeState) keepAccepted() {
	for k := range ts.withheldRefs {
		if ts.rejectedAll() {
			delete(ts.withheldRefs, k) // it holds none of them
			continue
		}
		r, _ := ts.ackedView.resource(k)
		ts.withheldRefs[k] = r
	}
}

// subscribesKey reports whether the stream subscribes to key by name or by
// the wildcard (plain names of the default authority).
func (ts *typeState) subscribesKey(key string) bool {
	if _, ok := ts.names[key]; ok {
		return true
	}
	auth, _ := keying.Authority(key)
	return ts.wildcard && auth == "" && !keying.HasParams(key)
}

// withholdReferenced withholds the removal of key from a Delta client while it
// holds a resource referring to it; it reports whether it did. What the
// client refers to is read once per response. Used with the stream's mu
// held.
func (b *deltaBuilder) withholdReferenced(key string) bool {
	st, ts, v := b.st, b.ts, b.v
	if b.refs == nil {
		refs := st.references(v.TypeURL)
		b.refs = &refs
	}
	if !b.refs.has(key) {
		delete(ts.withheldRefs, key)
		return false
	}
	if _, ok := ts.withheldRefs[key]; !ok {
		if ts.withheldRefs == nil {
			ts.withheldRefs = make(map[string]*Resource)
		}
		ts.withheldRefs[key] = ts.clientResource(key) // nil when unknown
	}
	st.noteWithheld(ts, v.TypeURL, "referenced")
	return true
}

// withheldFull returns what a full-state response built from v must still
// carry, by key: what v dropped — it is not in b, not in v — that the
// stream subscribes to and that something the client holds refers to (the
// client holds it then, or should); nil for one whose content the stream
// does not have (the client brought it from elsewhere), only while the
// reference may be about to go (mayLeave). ok is false when the response
// must be withheld whole: such a resource, or a referrer the stream cannot
// read while the client may lose something. Called with mu held.
func (st *stream) withheldFull(ts *typeState, v *View, b *body) (keep map[string]*Resource, ok bool) {
	if st.typeURL != "" || len(keying.Referrers(v.TypeURL)) == 0 {
		return nil, true
	}
	unread, fresh := map[string]bool{}, rechecks{}
	defer func() {
		maps.DeleteFunc(ts.missingSince, func(k string, _ missing) bool { return !unread[k] })
		st.recheckMissing(fresh)
	}()
	note := func(k string) missing { // (noted always: the waits run from the removal)
		unread[k] = true
		return ts.noteMissing(v, k, &fresh)
	}
	refs := st.references(v.TypeURL)
	if refs.unknown && ts.mayLose(v, b) && st.waitsForUnread(note(unreadReferrer), refs.unread) {
		return nil, false
	}
	// The keys the client may hold of a referenced name: the name, or its
	// subscription keys with TP2 parameters.
	cands := map[string]bool{}
	for _, keys := range []map[string]struct{}{ts.holdsKeys, ts.names} {
		for k := range keys {
			if name, _ := keying.SplitSubscriptionKey(k); refs.names[name] {
				cands[k] = true
			}
		}
	}
	for n := range refs.names {
		cands[n] = true
	}
	for k := range cands {
		listed := ts.unlistedHeld(v, k)
		if _, in := b.keys[k]; in || !ts.subscribes(v, k) && !listed {
			continue
		}
		if _, present := v.Resources[k]; present && !listed {
			continue // (not in b: denied, or not selected here)
		}
		_, held := ts.holdsKeys[k]
		if _, kept := ts.withheldRefs[k]; !held && !kept && !ts.fromElsewhere {
			continue // never held, and the stream did not send it: nothing to lose
		}
		r := ts.withheldRefs[k]
		if r == nil {
			r = ts.clientResource(k)
		}
		if r == nil {
			if name, _ := keying.SplitSubscriptionKey(k); !st.mayLeave(note(k), refs, name) {
				// The stream cannot keep what it cannot read, and the
				// reference may be the upstream's own for good: holding
				// the whole type would freeze every later update.
				continue
			}
		}
		if keep == nil {
			keep = make(map[string]*Resource)
		}
		keep[k] = r
	}
	return keep, !slices.Contains(slices.Collect(maps.Values(keep)), nil)
}

// mayLose reports whether the full state b built from v may drop something
// the client holds — one that may go (mayGo): losesNothing holds back a
// response that drops any other, so until one may go no wait for a referrer
// starts. For a client from elsewhere: anything of the wildcard set, a
// member of an answered glob or a name it subscribes to; otherwise what the
// stream sent that b drops. Called with mu held.
func (ts *typeState) mayLose(v *View, b *body) bool {
	if ts.fromElsewhere {
		if ts.wildcard {
			return true
		}
		for k := range ts.names {
			if keying.IsGlob(k) && v.GlobAnswered(k) || !keying.IsGlob(k) && !b.has(k) && ts.mayGo(v, k) {
				return true
			}
		}
		return false
	}
	for k := range ts.holdsKeys {
		if !b.has(k) && (ts.subscribes(v, k) && ts.mayGo(v, k) || ts.unlistedHeld(v, k)) {
			return true
		}
	}
	return false
}

// unreadReferrer is the missingSince key (never a resource's) of a full
// state held whole for a referrer the stream cannot read.
const unreadReferrer = ""

// waitsForUnread reports whether a full state that may drop what a
// referrer the stream cannot read (unread, by type) refers to is still held
// whole: within the reconnect's grace, or within Options.AnswerWait of the
// stream's first look at it (m), while the relay may still get the
// upstream's word on the referrer, or on the listener that names it, and
// the client the change that lets it go; while that word is queued for
// the client (unreadQueued); or while the relay's copy of the referrer is
// unsure (unreadUnsure). Past that, nothing tells when the reference
// goes, and holding on would withhold every later update of the type.
// Called with mu held.
func (st *stream) waitsForUnread(m missing, unread map[string][]string) bool {
	return st.inGrace() || time.Since(m.seen) < st.srv.opts.AnswerWait || st.unreadQueued(unread) ||
		st.unreadUnsure(unread)
}

// unreadQueued reports whether a change queued behind the response concerns
// a referrer the stream cannot read (unread, by type): the upstream's word
// on it has come, an upstream that breaks first sends the cluster's removal
// before the route's move, and the stream looks again once the change is
// built (releaseWithheld). The queue drains, so the wait ends even when the
// relay itself was too busy to look before AnswerWait passed. Called with
// mu held.
func (st *stream) unreadQueued(unread map[string][]string) bool {
	for _, it := range st.q.items {
		for _, k := range unread[it.view.TypeURL] {
			_, changed := it.names[k]
			_, forced := it.force[k]
			if k == "" || changed || forced {
				return true
			}
		}
	}
	return false
}

// mayLeave reports whether the reference to name, missing from a full
// state since m, which the client holds from elsewhere so that the
// response cannot keep it, may still be about to go, so the response waits
// for it: within the reconnect's grace; while a queued change of the
// referrer drops it (refs.leaving); within referrerGrace of the removal's
// arrival; or, while the relay's copy of the referrer is one no live
// upstream confirms (refs.doubtful), within Options.AnswerWait of the
// stream's first look at the removal. Every wait is bounded: an upstream
// that is away, or silent, may never answer, and the client would get no
// update of the type. Called with mu held.
func (st *stream) mayLeave(m missing, refs refSet, name string) bool {
	return time.Since(m.removed) < referrerGrace || st.inGrace() || refs.leaving[name] ||
		time.Since(m.seen) < st.srv.opts.AnswerWait && refs.doubtful[name]
}

// missing is when a full state first lacked a referenced key the client
// holds from elsewhere: when that removal arrived from upstream, and when
// the stream first judged it.
type missing struct{ removed, seen time.Time }

// noteMissing returns when key's removal, as first seen by the stream in v,
// arrived from upstream and when the stream first saw it; when that is now,
// it notes in rc that the stream looks again when the waits end. An
// upstream that sends type by type — ordered, or not — may send the
// referrer's move just after the removal, and nothing on a SotW stream
// says whether one is coming, so only a short wait from the removal (not
// from the reconnect, which may be long past) tells a move from the
// upstream's own dangling reference. Called with mu held.
func (ts *typeState) noteMissing(v *View, key string, rc *rechecks) missing {
	m, seen := ts.missingSince[key]
	if seen {
		return m
	}
	m = missing{removed: v.Received, seen: time.Now()}
	if m.removed.IsZero() {
		m.removed = m.seen
	}
	if ts.missingSince == nil {
		ts.missingSince = make(map[string]missing)
	}
	ts.missingSince[key] = m
	rc.add(m)
	return m
}

// rechecks are when the stream looks again at the keys a full state first
// lacked in one look (see mayLeave): once for them all, not once per key,
// each looking at them all.
type rechecks struct {
	any   bool      // a key was first missing: its AnswerWait runs from now
	grace time.Time // when the last removal's grace a key was judged within ends (zero: none)
}

// add notes a key first missing since m.
func (rc *rechecks) add(m missing) {
	rc.any = true
	if time.Since(m.removed) < referrerGrace {
		rc.grace = m.removed.Add(referrerGrace)
	}
}

// recheckMissing sets the timers of rc. Called with mu held.
func (st *stream) recheckMissing(rc rechecks) {
	if !rc.grace.IsZero() {
		st.recheckAfter(time.Until(rc.grace)) // (at once when already past)
	}
	if rc.any {
		st.recheckAfter(st.srv.opts.AnswerWait)
	}
}

// unlistedHeld reports whether the client holds key, a name of another
// authority, because the stream's wildcard gave it while the default servers
// listed it (Resource.InWildcard), and v lists it no more: the wildcard
// dropped it as it drops a plain name, and make before break keeps it as
// long. A client from elsewhere that was sent nothing yet may hold any such
// name. Called with mu held.
func (ts *typeState) unlistedHeld(v *View, key string) bool {
	if !ts.wildcard || ts.watches(v, key) {
		return false
	}
	if r, ok := v.Resources[key]; ok && r.InWildcard() {
		return false
	}
	if _, held := ts.holdsKeys[key]; !held {
		auth, _ := keying.Authority(key)
		return ts.fromElsewhere && ts.holdsKeys == nil && auth != ""
	}
	r := ts.withheldRefs[key] // kept by make before break: not in the View last sent
	if r == nil {
		r = ts.clientResource(key)
	}
	return r != nil && r.InWildcard()
}

// releaseWithheld looks again, after the client's resources of typeURL changed
// (a response sent, names unsubscribed), at what the stream withholds of
// the types they refer to: a withheld resource nothing refers to any more is
// queued for its removal, and a response withheld whole is looked at again.
// It reports whether it queued anything. Called with mu held.
func (st *stream) releaseWithheld(typeURL string) bool {
	queued := false
	for _, t := range keying.Referenced(typeURL) {
		ts := st.types[t]
		if ts == nil || ts.latest == nil || (len(ts.withheldRefs) == 0 && ts.withholding != "referenced") {
			continue
		}
		var free []string
		refs := st.references(t)
		for k := range ts.withheldRefs {
			if !refs.has(k) {
				free = append(free, k)
			}
		}
		// Withheld whole (nothing kept, or one the stream cannot read: the
		// referrer's change may be the upstream's answer, see mayLeave):
		// looked at again.
		whole := slices.Contains(slices.Collect(maps.Values(ts.withheldRefs)), nil)
		if len(free) > 0 || len(ts.withheldRefs) == 0 || whole {
			st.q.pushNames(ts.latest, free)
			queued = true
		}
	}
	return queued
}
