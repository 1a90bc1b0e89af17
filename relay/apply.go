package relay

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// OnUpdate applies one upstream event: it publishes a new View of the type
// when anything changed and notifies the streams that watch it. The
// response is decoded outside the lock; under it, an applier runs its phases
// in order (apply).
func (h *upstreamHandler) OnUpdate(u upstream.Update) error {
	if f := applying.Load(); f != nil {
		(*f)(u)
	}
	sc, authority := h.sc, h.authority
	in, err := decodeUpdate(authority, u)
	if err != nil {
		return err
	}
	h.r.m.UpstreamResponses.WithLabelValues(authority, metrics.TypeLabel(u.TypeURL), "ack").Inc()
	h.r.m.UpstreamLastUpdate.WithLabelValues(authority).SetToCurrentTime()

	s := h.r.lock()
	defer s.unlock()
	if s.closed || s.scopes[sc.key] != sc {
		return nil // closed, or a node's own scope whose streams are gone
	}
	if c := sc.upstreams[authority]; u.Complete && c != nil && !c.StillWhole(u.TypeURL) {
		u.Complete = false // the wildcard was dropped, or names forgotten, since it was received
	}
	tc := sc.typeCache(u.TypeURL)
	a := &applier{s: s, sc: sc, tc: tc, authority: authority, u: u, in: in,
		edit: editOf(tc.view), fullSotW: !u.Delta && keying.FullState(u.TypeURL),
		seen: make(map[string]struct{}, len(in.fresh)), beats: make(map[string]struct{}),
		resolved: make(map[string]bool), sent: make(map[string]map[string]bool),
		removed: make(map[string]bool), plainGone: make(map[string]bool), byKey: make(map[string]bool)}
	a.apply()
	return nil
}

// applying, when set (tests), is called with each upstream event before the
// relay applies it: a test holds one there to apply it after other changes.
var applying atomic.Pointer[func(upstream.Update)]

// incoming is an upstream response decoded for the cache, outside the lock.
type incoming struct {
	received time.Time
	// fresh are the resources with a body, encoded as downstream Resources
	// (the Any wrapper around the upstream's bytes).
	fresh []*downstream.Resource
	// constraints holds the TP2 constraints of the fresh variants that have
	// some.
	constraints map[*downstream.Resource]*discoverypb.DynamicParameterConstraints
	// heartbeats are the TTL heartbeats: unchanged, still present.
	heartbeats []upstream.Resource
	// noCache holds the names the upstream marked do_not_cache.
	noCache map[string]bool
}

// decodeUpdate encodes u's resources for the cache.
func decodeUpdate(authority string, u upstream.Update) (*incoming, error) {
	in := &incoming{received: time.Now(), fresh: make([]*downstream.Resource, 0, len(u.Resources)),
		constraints: make(map[*downstream.Resource]*discoverypb.DynamicParameterConstraints), noCache: make(map[string]bool)}
	for _, res := range u.Resources {
		if res.Heartbeat {
			in.heartbeats = append(in.heartbeats, res)
			continue
		}
		if res.DoNotCache {
			in.noCache[res.Name] = true
		}
		b, err := marshalDeterministic(res.Any)
		if err != nil {
			return nil, err
		}
		cs, cw, err := constraintsOf(res.Constraints)
		if err != nil {
			return nil, err
		}
		nr := &downstream.Resource{
			Name: res.Name, Spelling: res.Spelling, Version: resourceVersion(b, cs, res.TTL), Any: b, Authority: authority,
			UpstreamVersion: res.Version, Glob: keying.GlobOf(res.Name), Constraints: cs, ConstraintsWire: cw,
			TTL: res.TTL,
		}
		if cs != "" {
			in.constraints[nr] = res.Constraints
		}
		in.fresh = append(in.fresh, nr)
	}
	return in, nil
}

// applier applies one decoded upstream response to one type's cache. Its
// phases (apply) read top to bottom; its fields are what they hand on to
// each other. Used with mu held.
type applier struct {
	s         *state
	sc        *scope
	tc        *typeCache
	authority string
	u         upstream.Update
	in        *incoming
	edit      *viewEdit
	// fullSotW: the response is a SotW full state (LDS, CDS).
	fullSotW bool

	seen      map[string]struct{} // names the response carried
	beats     map[string]struct{} // names whose TTL a heartbeat (or resend) refreshed
	touched   bool                // a resource got a new upstream version, same bytes
	transient map[string]bool     // names with a transient TP3 error

	// TP2: variants of names in variant mode are stored apart and selected
	// for every key of the name once the response is applied, so that a
	// delete and a create of variants reach subscribers as one change.
	resolved  map[string]bool            // names whose selections to recompute
	sent      map[string]map[string]bool // name → constraints of the variants received
	removed   map[string]bool            // names the upstream deleted, every variant
	plainGone map[string]bool            // Delta: names in variant mode whose plain key removed_resources answered
	byKey     map[string]bool            // names sent for their keys with parameters alone

	moveNames []string // do_not_cache names whose watchers move to their own scopes
	uncovered []string // answers to subscriptions since ended
	rolled    []string // changed names that a guarded rollout sends to canaries first
}

// apply runs the phases in order.
func (a *applier) apply() {
	a.heartbeats()
	for _, e := range a.in.fresh {
		a.resource(e)
	}
	a.resourceErrors()
	if a.fullSotW {
		a.fullStateDeletions()
	} else {
		a.deltaDeletions()
	}
	a.reselect()
	a.forgetUncovered()
	a.holdHalted()
	a.declaredAnswered()
	a.unsureUnsent()
	a.publish()
	a.s.settleAside(a.tc)
}

// owned reports whether name, cached, belongs to another authority than the
// default servers that sent it. An xdstp name belongs to its authority. The
// default servers may list one in their wildcard answer too: once its own
// authority's stream delivers it, the default stream only lists it
// (Resource.Listed) and never replaces or deletes it, so it neither flips
// between the two nor leaves the wildcard set while both have it — while
// a subscription of its authority covers it: after that, the default
// servers are the only ones still speaking of it.
func (a *applier) owned(name string) (*downstream.Resource, bool) {
	cur, ok := a.edit.res[name]
	return cur, ok && a.authority == "" && cur.Authority != "" && cur.Authority != a.authority && a.tc.subscribedUpstream(name)
}

// listsAbsent reports whether the default servers list another authority's
// name that a live subscription of its authority said is gone: the two
// streams are not ordered, so the listing may be older than that word, and
// stored it would send clients older content than they hold.
func (a *applier) listsAbsent(name string) bool {
	auth, _ := keying.Authority(name)
	if a.authority != "" || auth == "" || a.tc.unconfirmed[auth] || !a.tc.subscribedUpstream(name) {
		return false
	}
	_, absent := a.edit.absent[name]
	return absent
}

// endedOverListing reports whether the authority's stream sent its name
// in answer to a subscription since ended while the cache holds the copy
// that the default servers' live wildcard lists: no subscription of the
// authority covers it any more, so the default servers alone speak of it,
// and the late answer may be older than their copy that clients hold.
func (a *applier) endedOverListing(name string) bool {
	cur, ok := a.edit.res[name]
	return ok && a.authority != "" && cur.Authority == "" && ofAuthority(name, a.authority) &&
		!a.tc.subscribedUpstream(name) && a.tc.up[keying.Wildcard] && !a.tc.unconfirmed[""]
}

// list marks another authority's name as listed, or not, by the default
// servers.
func (a *applier) list(name string, listed bool) {
	cur, ok := a.owned(name)
	switch {
	case !ok || cur.Listed == listed:
	case a.tc.variantMode(name):
		a.tc.relist(cur.Root(), listed) // the View holds selections of the stored variants
		a.resolved[name] = true
	default:
		a.edit.put(name, cur.WithListed(listed))
		a.edit.change(name)
	}
}

// heartbeats applies the TTL heartbeats (xDS TTL: a resource without its
// body, at the version held, refreshes the TTL; the streams that hold it
// pass it on).
func (a *applier) heartbeats() {
	for _, hb := range a.in.heartbeats {
		cur, ok := a.edit.res[hb.Name]
		if !ok || hb.Constraints != nil || (a.u.Delta && hb.Version != cur.UpstreamVersion) {
			continue // not for what the cache holds
		}
		a.seen[hb.Name] = struct{}{}
		if hb.TTL != cur.TTL {
			// A new TTL on the same bytes: an update (its version covers
			// the TTL).
			a.edit.put(hb.Name, cur.WithTTL(resourceVersion(cur.Any, cur.Constraints, hb.TTL), hb.TTL))
			a.edit.change(hb.Name)
		} else {
			a.beats[hb.Name] = struct{}{}
		}
		a.s.armTTL(a.tc, hb.Name, hb.TTL)
	}
}

// resource applies one resource of the response.
func (a *applier) resource(e *downstream.Resource) {
	tc := a.tc
	_, again := a.seen[e.Name] // this response carried the name already
	a.seen[e.Name] = struct{}{}
	if a.listsAbsent(e.Name) {
		tc.entry(e.Name).listedAbsent = true
		return
	}
	if a.endedOverListing(e.Name) {
		a.uncovered = append(a.uncovered, e.Name)
		return
	}
	a.confirm(e)
	if a.in.noCache[e.Name] && a.noCache(e) {
		return
	}
	a.edit.unmarkAbsent(e.Name)
	a.edit.markUnfound(e.Name, false)
	if _, ok := a.edit.errs[e.Name]; ok {
		a.edit.clearError(e.Name) // the resource is back: its error is over
		tc.clearUnreachable(e.Name)
		a.edit.change(e.Name)
	}
	if cur, ok := a.edit.res[e.Name]; ok && a.authority != "" && cur.InWildcard() {
		e.Listed = true // the default servers listed it first (a default variant too)
	}
	variant := e.Constraints != "" || tc.variantMode(e.Name)
	if cur, ok := a.edit.res[e.Name]; ok && !variant && a.authority == "" && tc.awaitsAuthority(e.Name, cur) {
		tc.setAside(e.Name, e) // see aside.go
		a.list(e.Name, true)
		return
	}
	if _, ok := a.owned(e.Name); ok {
		a.list(e.Name, true) // a variant too: their listing may be older than the authority's copy
		return
	}
	if variant {
		a.storeVariant(e, again)
		return
	}
	a.s.armTTL(tc, e.Name, e.TTL)
	a.answerGlob(e)
	if cur, ok := a.edit.res[e.Name]; ok && cur.Version == e.Version && cur.Authority == e.Authority && cur.Listed == e.Listed && cur.Spelling == e.Spelling {
		if cur.UpstreamVersion != e.UpstreamVersion {
			a.edit.put(e.Name, e) // same bytes, new upstream version: nothing to tell clients
			a.touched = true
		}
		if e.TTL > 0 {
			a.beats[e.Name] = struct{}{} // resent: its TTL starts again
		}
		return
	}
	a.edit.put(e.Name, e)
	a.edit.change(e.Name)
}

// confirm notes what the resource e confirms: a subscription that covers it
// confirms its cached value; an answer to a subscription since ended
// confirms nothing.
func (a *applier) confirm(e *downstream.Resource) {
	tc := a.tc
	switch {
	case e.Constraints != "":
		// A TP2 variant: what it confirms is known once the selections are (reselect).
	case tc.plainCovered(e.Name) || tc.listingCovered(e.Name, a.authority):
		tc.confirmed(e.Name) // the upstream sent it
	case tc.keySubscribed(e.Name):
		a.byKey[e.Name] = true // the default variant: it confirms the name if a key selects it (reselect)
	default:
		// An answer in flight when its subscription ended (the wildcard's,
		// say): the server counts it as held, but may forget it before
		// anything subscribes it again (go-control-plane does once it
		// answers what is still subscribed) and never tell the relay it
		// is gone. Unsure and forgotten, like the members of an ended
		// wildcard (unsureWildcardMembers).
		tc.markUnsure(e.Name)
		a.uncovered = append(a.uncovered, e.Name)
	}
}

// noCache notes a do_not_cache resource and reports whether it stops here:
// a shared or group scope never stores one, and its watchers move to their
// own scopes before anyone is notified, so nobody is told of its removal.
func (a *applier) noCache(e *downstream.Resource) bool {
	tc := a.tc
	tc.markNoCache(e.Name)
	if a.sc.own {
		return false
	}
	if a.authority == "" && keying.FullState(tc.typeURL) {
		// The default servers' LDS/CDS answer is the wildcard set, names
		// of another authority they list included.
		tc.noCacheWild = true
	}
	if _, had := a.edit.res[e.Name]; had {
		a.edit.drop(e.Name)
		tc.clearUnsure(e.Name)
		a.s.unref.forget(tc.lruKey(e.Name))
	}
	a.moveNames = append(a.moveNames, e.Name)
	return true
}

// storeVariant stores a TP2 variant (or a resource of a name in variant
// mode) apart from the View; reselect selects from the variants.
func (a *applier) storeVariant(e *downstream.Resource, again bool) {
	tc := a.tc
	if a.sent[e.Name] == nil {
		a.sent[e.Name] = make(map[string]bool)
	}
	if again && !tc.variantMode(e.Name) {
		// Its default came first in this response, applied as a plain
		// resource: it was sent too, or the full-state pruning drops it.
		a.sent[e.Name][""] = true
	}
	a.sent[e.Name][e.Constraints] = true
	tc.enterVariantMode(e.Name, a.edit.res)
	tc.putVariant(variant{res: e, c: a.in.constraints[e]})
	a.resolved[e.Name] = true
}

// reselect recomputes the selections of every name whose variants changed,
// and what they confirm; then confirms the names sent for their keys alone.
func (a *applier) reselect() {
	for name := range a.resolved {
		a.reselectName(name)
	}
	for name := range a.byKey {
		a.tc.confirmed(name) // not in variant mode: its keys select the one variant there is
	}
}

// reselectName recomputes the selections of name's keys.
func (a *applier) reselectName(name string) {
	tc, res := a.tc, a.edit.resources()
	a.pruneVariants(name)
	a.s.resolveVariants(tc, name, a.edit)
	// The name's plain selection, if the upstream sent it, is confirmed
	// when a subscription covers it: the name's own, the wildcard's, its
	// glob's, or a key with parameters that selects the same variant. A
	// key that selects another variant is never sent the plain one, nor
	// its deletion. Else it is an answer to a subscription since ended,
	// like an uncovered plain resource (confirm).
	if sel, ok := res[name]; ok && a.sent[name][sel.Constraints] && tc.selectionCovered(name, res, a.authority) {
		tc.confirmed(name)
	} else if a.byKey[name] {
		tc.markUnsure(name)
		a.uncovered = append(a.uncovered, name)
	}
	delete(a.byKey, name)
	for k := range tc.get(name).params {
		if sel, ok := res[k]; ok && a.sent[name][sel.Constraints] && tc.up[k] {
			tc.confirmed(k) // the variant the key's subscription selects
		}
		if sel, ok := res[k]; ok && a.edit.errs[k] != nil && a.sent[name][sel.Constraints] {
			a.edit.clearError(k) // the variant it selects arrived: its error is over
			tc.clearUnreachable(k)
			a.edit.change(k)
		}
	}
	a.markGone(name)
}

// unsureUnsent: the first answer of a SotW type that is not full state
// (RDS, EDS) on the authority's new stream, or its silence, confirms what it
// carries, not the rest of the authority's cached names: such a response
// need not carry them (no response proves one absent), and the upstream may
// have changed them while the relay was away. They are unsure, as a Delta
// stream's undeclared names are (declared), until the server sends them.
func (a *applier) unsureUnsent() {
	tc := a.tc
	if a.u.Delta || a.fullSotW || !a.edit.old.Unconfirmed[a.authority] {
		return
	}
	for n, res := range a.edit.res {
		if _, sent := a.seen[n]; sent || n != res.Name || res.Constraints != "" || !tc.speaksFor(res, a.authority) || tc.get(n).unsure() {
			continue
		}
		tc.markUnsure(n)
		if tc.subscribedUpstream(n) {
			a.s.armUnknown(tc, n)
		}
	}
}

// forgetUncovered has the upstream client forget the answers to
// subscriptions since ended (nothing on SotW).
func (a *applier) forgetUncovered() {
	if c := a.sc.upstreams[a.authority]; c != nil && len(a.uncovered) > 0 {
		c.Forget(a.u.TypeURL, a.uncovered...)
	}
}

// holdHalted applies a guarded rollout's halts: a version whose rollout
// halted, sent again, keeps the accepted one; other changes of cached
// resources go to canaries first (rolled).
func (a *applier) holdHalted() {
	if a.s.cfg.Rollout == nil || a.sc.own {
		return
	}
	tc, old := a.tc, a.edit.old
	for name := range a.edit.changed {
		nr, ok := a.edit.res[name]
		cur, had := old.Resources[name]
		if !ok || !had || nr.Version == cur.Version {
			continue // additions, removals and a new listing alone are not rolled out
		}
		if tc.get(name).halted == nr.Version {
			a.edit.put(name, cur) // a halted version again: keep the accepted one
			delete(a.edit.changed, name)
			continue
		}
		tc.clearHalted(name)
		a.rolled = append(a.rolled, name)
	}
}

// publish publishes the next View, when anything changed, and delivers it:
// first the do_not_cache moves, then the rollout's canaries and barriers or
// the plain notification, then — when the View confirms an authority again —
// every watcher of the type, so that streams that held back look again.
func (a *applier) publish() {
	s, tc, old := a.s, a.tc, a.edit.old
	// Complete: the wildcard set is held, and kept up to date only while
	// the wildcard is subscribed (a warm-restart file's set, kept for new
	// clients while the upstream is away, goes once the upstream answers).
	// A shared scope never holds the do_not_cache resources of the set, so
	// it never holds the whole set while one of them is in it.
	complete := (old.Complete || (a.u.Complete && a.authority == "")) && (tc.up[keying.Wildcard] || a.authority != "") &&
		(a.sc.own || !tc.withholdsWildcard())
	unfound := a.wildcardUnfound(complete)
	confirmed := old.Unconfirmed[a.authority] // the upstream answered on its current stream
	delete(tc.unconfirmed, a.authority)
	unconfirmed := old.Unconfirmed
	if confirmed {
		unconfirmed = maps.Clone(tc.unconfirmed)
	}
	beats := a.beats
	if len(beats) == 0 {
		beats = nil
	}
	if len(a.edit.changed) == 0 && complete == old.Complete && !unfound && !confirmed {
		if a.touched || len(a.edit.res) != len(old.Resources) || beats != nil || tc.unsureMoved {
			a.edit.changed = nil
			v := a.edit.view(s.nextSeq())
			v.Heartbeats = beats
			s.publish(tc, v)
			if beats != nil {
				s.notify(tc, v) // the streams holding them pass the heartbeats on
			}
		}
		s.moveNoCache(tc, a.moveNames)
		s.tellSured(tc, tc.view)
		return
	}
	v := a.edit.view(s.nextSeq())
	v.Complete, v.Unconfirmed, v.Received, v.Heartbeats = complete, unconfirmed, a.in.received, beats
	s.publish(tc, v)
	s.moveNoCache(tc, a.moveNames)
	a.deliver(v)
	s.tellSured(tc, v)
	if confirmed {
		s.notifyEvery(tc, v) // confirmed again: streams that held back for its data look again
	}
}

// deliver notifies the watchers of what v changed. While a rollout is
// pending, canaries get the change and report on it; the other watchers of
// what it changes get a barrier (once); everyone else is notified as usual,
// behind their barrier if they hold one.
func (a *applier) deliver(v *downstream.View) {
	s, tc, old := a.s, a.tc, a.edit.old
	if tc.ro == nil && len(a.rolled) > 0 {
		s.startRollout(tc, old, v, a.rolled, watchers(s.watchersOf(tc, a.rolled)))
	} else if tc.ro != nil && len(a.rolled) > 0 {
		tc.ro.add(old, v, a.rolled)
	}
	if tc.ro == nil {
		s.notify(tc, v)
		return
	}
	ro := tc.ro
	canaries, held, rest := delivery{v: v, ro: ro, canary: true}, delivery{v: v, ro: ro}, delivery{v: v}
	for _, b := range s.watchersOf(tc, append(slices.Collect(maps.Keys(v.Changed)), slices.Collect(maps.Keys(v.Heartbeats))...)) {
		switch {
		case ro.isCanary(b.w):
			canaries.to = append(canaries.to, b)
		case ro.watches(b.w) && ro.hold(b.w):
			held.to = append(held.to, b)
		default:
			rest.to = append(rest.to, b)
		}
	}
	for _, d := range []delivery{canaries, held, rest} {
		s.fan.add(d)
	}
}
