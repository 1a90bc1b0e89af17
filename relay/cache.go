package relay

import (
	"maps"
	"slices"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// typeCache is the cache and the registry of one type in one scope. Guarded
// by Relay.mu.
type typeCache struct {
	sc      *scope
	typeURL string
	// view is the current published View; replaced, never modified.
	view *downstream.View
	// bytes is the size of view's resources.
	bytes int

	// watchers holds, per name, the streams that subscribe to it by name, by
	// stream id (integer keys hash faster than interfaces on the hot path).
	watchers map[string]*watcherSet
	// wild holds the streams with a wildcard subscription.
	wild *watcherSet
	// up holds the names (and keying.Wildcard) subscribed upstream.
	up map[string]bool
	// linger holds the pending unsubscriptions of names no stream watches.
	linger map[string]*lingerEntry

	// ro is the pending guarded rollout of this type, if any; halted holds
	// the versions (by name) whose rollout halted: the upstream sending them
	// again does not start another rollout.
	ro     *rollout
	halted map[string]string

	// unavail holds, per subscribed name the cache knows nothing of, the
	// timer that reports it UNAVAILABLE or, later, absent (armUnknown);
	// unreachable the names whose error is that UNAVAILABLE.
	unavail     map[string]*time.Timer
	unreachable map[string]bool
	// unsure holds the cached names whose upstream subscription ended and
	// that the upstream has not sent since, or that came from the
	// warm-restart file: the upstream may no longer tell the relay of them (a
	// Delta server forgets what was unsubscribed; a SotW server's silence on
	// a name subscribed later on the stream proves nothing at once), so
	// when they are subscribed again their cached value is served but not
	// trusted — armUnknown takes them for deleted unless the upstream sends
	// them again (a deletion meanwhile would otherwise never reach the cache).
	unsure map[string]bool

	// TP2 (see variants.go): variants holds the stored variants of the
	// names that have constrained variants or subscriptions with parameters;
	// the View's entries for such a name (its plain key and its keys with
	// parameters) are selections from them. Any other name's View entry is
	// its only variant. params holds, per name, its subscription keys with
	// parameters.
	variants map[string][]variant
	params   map[string]map[string]map[string]string // name → key → its parameters

	// noCache holds the names the upstream marked do_not_cache (see
	// nocache.go); noCacheWild that one of them is in the wildcard set.
	noCache     map[string]bool
	noCacheWild bool

	// ttl holds the expiry of the resources the upstream gave a TTL (ttl.go).
	ttl map[string]*time.Timer

	// unconfirmed holds the authorities whose data in the View no upstream
	// response confirmed since their stream (re)started or the relay loaded
	// its warm-restart file (published as View.Unconfirmed).
	unconfirmed map[string]bool
}

type lingerEntry struct{ timer *time.Timer }

func (tc *typeCache) lruKey(name string) lruKey {
	return lruKey{scope: tc.sc.key, Key: keying.Key{TypeURL: tc.typeURL, Name: name}}
}

// upstreamHandler receives one authority's upstream data for one scope.
type upstreamHandler struct {
	r         *Relay
	sc        *scope
	authority string
}

func (h *upstreamHandler) OnUpdate(u upstream.Update) error {
	return h.r.onUpdate(h.sc, h.authority, u)
}

func (h *upstreamHandler) OnState(server string, connected bool, err error) {
	h.r.mu.Lock()
	h.sc.connected[h.authority] = connected
	if connected {
		h.r.rearmUnknown(h.sc, h.authority)
	} else {
		h.r.unconfirm(h.sc, h.authority)
	}
	h.r.mu.Unlock()
	if !connected {
		h.r.m.UpstreamReconnects.WithLabelValues(h.authority, server).Inc()
	}
	if err != nil {
		h.r.log.Info("upstream disconnected", zap.String("authority", h.authority), zap.String("server", server), zap.Error(err))
	}
}

// unconfirm marks the data of authority in the Views of sc that hold some
// unconfirmed (View.Unconfirmed): its upstream stream is gone. Nobody is
// notified: the View serves as before (fail static) but tells no client
// that held config elsewhere that any of it is gone. Called with mu held.
func (r *Relay) unconfirm(sc *scope, authority string) {
	for _, tc := range sc.types {
		if tc.unconfirmed[authority] || !tc.holds(authority) {
			continue
		}
		if tc.unconfirmed == nil {
			tc.unconfirmed = make(map[string]bool)
		}
		tc.unconfirmed[authority] = true
		v := r.nextView(tc, nil)
		v.Unconfirmed = maps.Clone(tc.unconfirmed)
		r.publish(tc, v)
	}
}

// holds reports whether tc caches or subscribes anything of authority.
// Called with mu held.
func (tc *typeCache) holds(authority string) bool {
	for n := range tc.up {
		if a, _ := keying.Authority(n); a == authority {
			return true
		}
	}
	for _, res := range tc.view.Resources {
		if res.Authority == authority {
			return true
		}
	}
	return false
}

// nextView returns the next View of tc — its current state, a new sequence
// number (relay-wide, so Views of different scopes compare in publication
// order) and changed — for the caller to adjust and publish. Called with mu
// held.
func (r *Relay) nextView(tc *typeCache, changed map[string]struct{}) *downstream.View {
	return tc.view.Next(r.nextSeq(), changed)
}

// nextSeq returns a new View sequence number. Called with mu held.
func (r *Relay) nextSeq() uint64 {
	r.seq++
	return r.seq
}

// onUpdate applies one accepted upstream response: it publishes a new View of
// the type when anything changed and notifies the streams that watch it.
func (r *Relay) onUpdate(sc *scope, authority string, u upstream.Update) error {
	now := time.Now()
	// Encode outside the lock: the Any wrapper around the upstream's bytes.
	fresh := make([]*downstream.Resource, 0, len(u.Resources))
	constraints := make(map[*downstream.Resource]*discoverypb.DynamicParameterConstraints)
	var heartbeats []upstream.Resource // TTL heartbeats: unchanged, still present
	noCache := make(map[string]bool)
	for _, res := range u.Resources {
		if res.Heartbeat {
			heartbeats = append(heartbeats, res)
			continue
		}
		if res.DoNotCache {
			noCache[res.Name] = true
		}
		b, err := marshalDeterministic(res.Any)
		if err != nil {
			return err
		}
		cs, cw, err := constraintsOf(res.Constraints)
		if err != nil {
			return err
		}
		nr := &downstream.Resource{
			Name: res.Name, Version: resourceVersion(b, cs, res.TTL), Any: b, Authority: authority,
			UpstreamVersion: res.Version, Glob: keying.GlobOf(res.Name), Constraints: cs, ConstraintsWire: cw,
			TTL: res.TTL,
		}
		if cs != "" {
			constraints[nr] = res.Constraints
		}
		fresh = append(fresh, nr)
	}
	r.m.UpstreamResponses.WithLabelValues(authority, metrics.TypeLabel(u.TypeURL), "ack").Inc()
	r.m.UpstreamLastUpdate.WithLabelValues(authority).SetToCurrentTime()

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.scopes[sc.key] != sc {
		return nil // closed, or a node's own scope whose streams are gone
	}
	tc := sc.typeCache(u.TypeURL)
	old := tc.view
	res := maps.Clone(old.Resources)
	changed := make(map[string]struct{})
	// An xdstp name belongs to its authority. The default servers may list
	// one in their wildcard answer too: once its own authority's stream
	// delivers it, the default stream only lists it (Resource.Listed) and
	// never replaces or deletes it, so it neither flips between the two
	// nor leaves the wildcard set while both have it.
	owned := func(name string) (*downstream.Resource, bool) {
		cur, ok := res[name]
		return cur, ok && authority == "" && cur.Authority != "" && cur.Authority != authority
	}
	list := func(name string, listed bool) {
		if cur, ok := owned(name); ok && cur.Listed != listed {
			res[name] = cur.WithListed(listed)
			changed[name] = struct{}{}
		}
	}
	seen := make(map[string]struct{}, len(fresh))
	touched := false
	// xDS TTL: a heartbeat (a resource without its body, at the version
	// held) refreshes the TTL; the streams that hold it pass it on.
	beats := make(map[string]struct{})
	for _, hb := range heartbeats {
		cur, ok := res[hb.Name]
		if !ok || hb.Constraints != nil || (u.Delta && hb.Version != cur.UpstreamVersion) {
			continue // not for what the cache holds
		}
		seen[hb.Name] = struct{}{}
		if hb.TTL != cur.TTL {
			// A new TTL on the same bytes: an update (its version covers
			// the TTL).
			nr := cur.WithTTL(resourceVersion(cur.Any, cur.Constraints, hb.TTL), hb.TTL)
			res[hb.Name] = nr
			changed[hb.Name] = struct{}{}
		} else {
			beats[hb.Name] = struct{}{}
		}
		r.armTTL(tc, hb.Name, hb.TTL)
	}
	absent, copied := old.Absent, false
	ownAbsent := func() {
		if !copied {
			absent, copied = maps.Clone(old.Absent), true
			if absent == nil {
				absent = make(map[string]struct{})
			}
		}
	}
	errs, errsCopied := old.Errors, false
	ownErrs := func() {
		if !errsCopied {
			errs, errsCopied = maps.Clone(old.Errors), true
			if errs == nil {
				errs = make(map[string]*downstream.ResourceError)
			}
		}
	}
	// TP2: variants of names in variant mode are stored apart and selected
	// for every key of the name once the response is applied, so
	// that a delete and a create of variants reach subscribers as one change.
	fullSotW := !u.Delta && keying.FullState(u.TypeURL)
	resolved := make(map[string]bool)
	sent := make(map[string]map[string]bool) // name → constraints of the variants received
	removed := make(map[string]bool)         // Delta: names the upstream removed
	var moveNames []string                   // do_not_cache names whose watchers move to their own scopes
	var uncovered []string                   // answers to subscriptions since ended
	byKey := make(map[string]bool)           // names sent for their keys with parameters alone
	for _, e := range fresh {
		_, again := seen[e.Name] // this response carried the name already
		seen[e.Name] = struct{}{}
		switch {
		case e.Constraints != "":
			// A TP2 variant: what it confirms is known once the selections are (below).
		case tc.plainCovered(e.Name) || !ofAuthority(e.Name, authority):
			tc.confirmed(e.Name) // the upstream sent it
		case tc.keySubscribed(e.Name):
			byKey[e.Name] = true // the default variant: it confirms the name if a key selects it (below)
		default:
			// An answer in flight when its subscription ended (the wildcard's,
			// say): the server counts it as held, but may forget it before
			// anything subscribes it again (go-control-plane does once it
			// answers what is still subscribed) and never tell the relay it
			// is gone. Unsure and forgotten, like the members of an ended
			// wildcard (unsureWildcardMembers).
			tc.markUnsure(e.Name)
			uncovered = append(uncovered, e.Name)
		}
		if noCache[e.Name] {
			if tc.noCache == nil {
				tc.noCache = make(map[string]bool)
			}
			tc.noCache[e.Name] = true
			if !sc.own {
				// Never stored here; its watchers move before anyone is
				// notified, so nobody is told of its removal.
				if _, had := res[e.Name]; had {
					delete(res, e.Name)
					r.unref.forget(tc.lruKey(e.Name))
				}
				moveNames = append(moveNames, e.Name)
				continue
			}
		}
		if _, ok := absent[e.Name]; ok {
			ownAbsent()
			delete(absent, e.Name)
		}
		if _, ok := errs[e.Name]; ok {
			ownErrs() // the resource is back: its error is over
			delete(errs, e.Name)
			delete(tc.unreachable, e.Name)
			changed[e.Name] = struct{}{}
		}
		if e.Constraints != "" || tc.variantMode(e.Name) {
			if sent[e.Name] == nil {
				sent[e.Name] = make(map[string]bool)
			}
			if again && !tc.variantMode(e.Name) {
				// Its default came first in this response, applied as a
				// plain resource: it was sent too, or the full-state pruning
				// drops it (found by a review).
				sent[e.Name][""] = true
			}
			sent[e.Name][e.Constraints] = true
			tc.enterVariantMode(e.Name, res)
			tc.putVariant(variant{res: e, c: constraints[e]})
			resolved[e.Name] = true
			continue
		}
		if _, ok := owned(e.Name); ok {
			list(e.Name, true)
			continue
		}
		if cur, ok := res[e.Name]; ok && authority != "" && cur.InWildcard() {
			e.Listed = true // the default servers listed it first
		}
		r.armTTL(tc, e.Name, e.TTL)
		if cur, ok := res[e.Name]; ok && cur.Version == e.Version && cur.Authority == e.Authority && cur.Listed == e.Listed {
			if cur.UpstreamVersion != e.UpstreamVersion {
				res[e.Name] = e // same bytes, new upstream version: nothing to tell clients
				touched = true
			}
			if e.TTL > 0 {
				beats[e.Name] = struct{}{} // resent: its TTL starts again
			}
			continue
		}
		res[e.Name] = e
		changed[e.Name] = struct{}{}
	}
	remove := func(name string) {
		if tc.variantMode(name) {
			tc.variants[name] = nil
			resolved[name] = true
			return
		}
		list(name, false) // the default servers no longer list it
		if cur, ok := res[name]; ok && cur.Authority == authority {
			delete(res, name)
			changed[name] = struct{}{}
			r.unref.forget(tc.lruKey(name))
			r.armTTL(tc, name, 0)
		}
	}
	// TP3: resource errors are cached per name and replayed to later
	// subscribers. NOT_FOUND and PERMISSION_DENIED are data errors (the
	// resource is gone for clients); the others are transient (clients keep
	// what they have).
	transient := make(map[string]bool, len(u.Errors))
	for _, e := range u.Errors {
		if _, sent := seen[e.Name]; sent {
			continue
		}
		if _, ok := owned(e.Name); ok {
			continue
		}
		if e.Constraints != nil {
			// TP2: an error for one variant holds for the subscriptions whose
			// parameters match its constraints.
			ownErrs()
			for _, k := range tc.errorKeys(e.Name, e.Constraints) {
				errs[k] = &downstream.ResourceError{Name: k, Code: e.Code, Message: e.Message}
				changed[k] = struct{}{}
			}
			if cs, _, _ := constraintsOf(e.Constraints); tc.variantMode(e.Name) &&
				(e.Code == codes.NotFound || e.Code == codes.PermissionDenied) {
				tc.dropVariant(e.Name, cs)
				resolved[e.Name] = true
			}
			continue
		}
		ownErrs()
		errs[e.Name] = &downstream.ResourceError{Name: e.Name, Code: e.Code, Message: e.Message}
		delete(tc.unreachable, e.Name) // the upstream's word replaces the relay's own
		changed[e.Name] = struct{}{}
		if e.Code == codes.NotFound || e.Code == codes.PermissionDenied {
			remove(e.Name)
		} else {
			transient[e.Name] = true
		}
	}
	// deleted applies the upstream's word that name does not exist: it
	// leaves the cache, and a name subscribed as such is remembered as
	// absent, so that later subscribers are told at once.
	deleted := func(name string) {
		if _, ok := owned(name); ok {
			list(name, false)
			return
		}
		removed[name] = true
		delete(tc.unsure, name)
		if _, cached := res[name]; cached || tc.variantMode(name) {
			remove(name) // every variant of it, too
		}
		if tc.unreachable[name] {
			// The relay's own UNAVAILABLE is over: the upstream answered. (A
			// transient error would keep the client its copy of what is gone.)
			ownErrs()
			delete(errs, name)
			delete(tc.unreachable, name)
			changed[name] = struct{}{}
		}
		if a, _ := keying.Authority(name); a != authority {
			return // the default servers' word on another authority's name
		}
		if _, known := absent[name]; !known && tc.up[name] {
			ownAbsent()
			absent[name] = struct{}{}
			changed[name] = struct{}{}
		}
	}
	if fullSotW {
		// xDS: a resource missing from a SotW LDS/CDS response is deleted —
		// judged by what the upstream client knew the response answers
		// (u.Removed), never by subscriptions made since, which it may not
		// answer yet; and, when it is the wildcard's full set, by the
		// response itself.
		gone := slices.Clone(u.Removed)
		if u.Complete && !u.Settled && authority == "" {
			for key, cur := range old.Resources {
				if _, ok := seen[key]; !ok && key == cur.Name && cur.InWildcard() {
					gone = append(gone, key)
				}
			}
		}
		if u.Settled && u.Present != nil && authority == "" {
			// The last response answered the wildcard: it is the whole set.
			present := make(map[string]struct{}, len(u.Present))
			for _, n := range u.Present {
				present[n] = struct{}{}
			}
			for key, cur := range old.Resources {
				if _, ok := present[key]; !ok && key == cur.Name && cur.InWildcard() {
					gone = append(gone, key)
				}
			}
		}
		for _, name := range gone {
			if _, ok := seen[name]; !ok && !transient[name] {
				deleted(name)
			}
		}
	} else {
		for _, rv := range u.RemovedVariants {
			cs, _, _ := constraintsOf(rv.Constraints)
			switch {
			case tc.variantMode(rv.Name):
				tc.dropVariant(rv.Name, cs)
				resolved[rv.Name] = true
			case cs == "":
				remove(rv.Name)
			}
		}
		for _, name := range u.Removed {
			deleted(name)
		}
	}
	for name := range resolved {
		if fullSotW && sent[name] != nil {
			// A full-state response carries every variant of what it names.
			tc.variants[name] = slices.DeleteFunc(tc.variants[name], func(v variant) bool { return !sent[name][v.res.Constraints] })
		}
		r.resolveVariants(tc, name, res, changed)
		// The name's plain selection, if the upstream sent it, is confirmed
		// when a subscription covers it: the name's own, the wildcard's, its
		// glob's, or a key with parameters that selects the same variant. A
		// key that selects another variant is never sent the plain one, nor
		// its deletion (found by a review). Else it is an answer to a
		// subscription since ended, like the default branch above.
		if sel, ok := res[name]; ok && sent[name][sel.Constraints] && tc.selectionCovered(name, res, authority) {
			tc.confirmed(name)
		} else if byKey[name] {
			tc.markUnsure(name)
			uncovered = append(uncovered, name)
		}
		delete(byKey, name)
		for k := range tc.params[name] {
			if sel, ok := res[k]; ok && errs[k] != nil && sent[name][sel.Constraints] {
				ownErrs() // the variant it selects arrived: its error is over
				delete(errs, k)
				changed[k] = struct{}{}
			}
		}
		for k := range tc.params[name] {
			if _, ok := res[k]; ok {
				if _, was := absent[k]; was {
					ownAbsent() // a variant matches again
					delete(absent, k)
				}
				continue
			}
			// The upstream says the name does not exist, or sent every
			// variant of it (full state) and none matches k — a SotW
			// full-state response only of the keys it answers (issue 12,
			// item 4, for TP2 keys).
			_, answered := u.Keys[k]
			if tc.up[k] && (removed[name] || (fullSotW && sent[name] != nil)) && (!fullSotW || answered) {
				ownAbsent()
				absent[k] = struct{}{}
				changed[k] = struct{}{}
			}
		}
	}
	for name := range byKey {
		tc.confirmed(name) // not in variant mode: its keys select the one variant there is
	}
	if c := sc.upstreams[authority]; c != nil && len(uncovered) > 0 {
		c.Forget(u.TypeURL, uncovered...) // (nothing on SotW)
	}
	// Guarded rollout: changes of cached resources go to canaries first.
	var rolled []string
	if r.cfg.Rollout != nil && !sc.own {
		for name := range changed {
			nr, ok := res[name]
			cur, had := old.Resources[name]
			if !ok || !had {
				continue // additions and removals are not rolled out
			}
			if tc.halted[name] == nr.Version {
				res[name] = cur // a halted version again: keep the accepted one
				delete(changed, name)
				continue
			}
			delete(tc.halted, name)
			rolled = append(rolled, name)
		}
	}
	// Complete: the wildcard set is held, and kept up to date only while
	// the wildcard is subscribed (a warm-restart file's set, kept for new
	// clients while the upstream is away, goes once the upstream answers).
	// A shared scope never holds the do_not_cache resources of the set, so
	// it never holds the whole set while one of them is in it.
	complete := (old.Complete || (u.Complete && authority == "")) && (tc.up[keying.Wildcard] || authority != "") &&
		(sc.own || !tc.withholdsWildcard())
	confirmed := old.Unconfirmed[authority] // the upstream answered on its current stream
	delete(tc.unconfirmed, authority)
	unconfirmed := old.Unconfirmed
	if confirmed {
		unconfirmed = maps.Clone(tc.unconfirmed)
	}
	if len(beats) == 0 {
		beats = nil
	}
	if len(changed) == 0 && complete == old.Complete && !confirmed {
		if touched || len(res) != len(old.Resources) || beats != nil {
			v := r.nextView(tc, nil)
			v.Resources, v.Absent, v.Errors, v.Heartbeats = res, absent, errs, beats
			r.publish(tc, v)
			if beats != nil {
				r.notify(tc, v) // the streams holding them pass the heartbeats on
			}
		}
		r.moveNoCache(tc, moveNames)
		return nil
	}
	v := r.nextView(tc, changed)
	v.Resources, v.Absent, v.Errors, v.Complete, v.Unconfirmed, v.Received = res, absent, errs, complete, unconfirmed, now
	v.Heartbeats = beats
	r.publish(tc, v)
	if confirmed {
		// Confirmed again: streams that held back for its data look again.
		defer r.notifyEvery(tc, v)
	}
	r.moveNoCache(tc, moveNames)
	if tc.ro == nil && len(rolled) > 0 {
		r.startRollout(tc, old, v, rolled, watchers(r.watchersOf(tc, rolled)))
	} else if tc.ro != nil && len(rolled) > 0 {
		tc.ro.add(old, v, rolled)
	}
	if tc.ro == nil {
		r.notify(tc, v)
		return nil
	}
	// A rollout is pending: canaries get the change and report on it; the
	// other watchers of what it changes get a barrier (once); everyone else
	// is notified as usual, behind their barrier if they hold one.
	ro := tc.ro
	canaries, held, rest := delivery{v: v, ro: ro, canary: true}, delivery{v: v, ro: ro}, delivery{v: v}
	for _, b := range r.watchersOf(tc, append(slices.Collect(maps.Keys(changed)), slices.Collect(maps.Keys(beats))...)) {
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
		r.fan.add(d)
	}
	return nil
}

// notifyEvery tells every stream that watches something of tc of v. Called
// with mu held.
func (r *Relay) notifyEvery(tc *typeCache, v *downstream.View) {
	r.fan.add(delivery{to: r.watchersOf(tc, slices.Collect(maps.Keys(tc.watchers))), v: v})
}

// notify tells the streams that watch a changed name (or the wildcard) of v,
// once each. Called with mu held; the streams are told outside it, in order
// (fanout.go).
func (r *Relay) notify(tc *typeCache, v *downstream.View) {
	names := append(slices.Collect(maps.Keys(v.Changed)), slices.Collect(maps.Keys(v.Heartbeats))...)
	r.fan.add(delivery{to: r.watchersOf(tc, names), v: v})
}

// watchers returns the streams of bindings.
func watchers(bs []*binding) []downstream.Watcher {
	out := make([]downstream.Watcher, len(bs))
	for i, b := range bs {
		out[i] = b.w
	}
	return out
}

// globOf returns the glob collection of a changed name, present or removed.
func globOf(v *downstream.View, name string) string {
	if r, ok := v.Resources[name]; ok {
		return r.Glob
	}
	return keying.GlobOf(name)
}

// watchersOf returns, once each, the bound streams watching one of names or
// the wildcard. Called with mu held.
func (r *Relay) watchersOf(tc *typeCache, names []string) []*binding {
	set := make(map[uint64]struct{}, tc.wild.len())
	add := func(ws *watcherSet) {
		for id := range ws.all {
			set[id] = struct{}{}
		}
	}
	add(tc.wild)
	for _, n := range names {
		add(tc.watchers[n])
		if g := globOf(tc.view, n); g != "" {
			add(tc.watchers[g])
		}
	}
	out := make([]*binding, 0, len(set))
	for id := range set {
		if b := r.bound[id]; b != nil {
			out = append(out, b)
		}
	}
	return out
}

// watcher returns the bound stream with id, nil if it has ended. Called
// with mu held.
func (r *Relay) watcher(id uint64) downstream.Watcher {
	if b := r.bound[id]; b != nil {
		return b.w
	}
	return nil
}

// upstreamVersions returns the upstream's versions of the resources of
// typeURL the cache holds from authority: the Delta initial_resource_versions
// (the upstream client keeps those its first request subscribes to).
func (r *Relay) upstreamVersions(sc *scope, authority, typeURL string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	tc := sc.types[typeURL]
	if tc == nil {
		return nil
	}
	out := make(map[string]string)
	for name, res := range tc.view.Resources {
		if res.Authority == authority && res.UpstreamVersion != "" && name == res.Name && res.Constraints == "" {
			out[name] = res.UpstreamVersion
		}
	}
	return out
}

// declared: a Delta stream's first request of typeURL to authority's
// servers told the server the relay holds names, which the request
// subscribes to. An unsure one is sure again — the server now tells the
// relay if it is gone — if it is still subscribed (its subscription may
// have ended since the request was built). Of the authority's other cached
// names the new stream's server knows nothing, and may never speak (a
// deletion while the relay was on another stream, or another server, never
// reaches the cache): they are unsure, confirmed when the server sends them
// once they are subscribed (a subscription made since the request was built
// arms the wait for them).
func (r *Relay) declared(sc *scope, authority, typeURL string, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tc := sc.types[typeURL]
	if tc == nil {
		return
	}
	told := make(map[string]bool, len(names))
	for _, n := range names {
		told[n] = true
		if tc.subscribedUpstream(n) {
			tc.confirmed(n)
		}
	}
	for n, res := range tc.view.Resources {
		if told[n] || n != res.Name || res.Constraints != "" || res.Authority != authority || tc.unsure[n] {
			continue
		}
		tc.markUnsure(n)
		if tc.subscribedUpstream(n) {
			r.armUnknown(tc, n)
		}
	}
}

// markUnsure marks the cached name unsure (see typeCache.unsure). Called
// with mu held.
func (tc *typeCache) markUnsure(name string) {
	if tc.unsure == nil {
		tc.unsure = make(map[string]bool)
	}
	tc.unsure[name] = true
}

// confirmed: the upstream confirmed the cached name (it sent it, or the
// server was told the relay holds it). It is sure, and the wait for it
// (armUnknown) is over: a wait left running would take it for deleted
// should it become unsure again before its timer fires — for a question
// the upstream has already answered (found by the oracle, seed 1401575: a
// warm-restart file's cluster, confirmed, then unsure when a subscription
// with parameters of it ended). Called with mu held.
func (tc *typeCache) confirmed(name string) {
	delete(tc.unsure, name)
	tc.stopWait(name)
}

// stopWait stops the wait for name (armUnknown), if one runs. Called with
// mu held.
func (tc *typeCache) stopWait(name string) {
	if t := tc.unavail[name]; t != nil {
		t.Stop()
		delete(tc.unavail, name)
	}
}

// ofAuthority reports whether name belongs to authority ("" the default
// servers').
func ofAuthority(name, authority string) bool {
	a, _ := keying.Authority(name)
	return a == authority
}

// subscribedUpstream reports whether an upstream subscription covers the
// plain name n: its own, the wildcard's (the default authority's names),
// its glob collection's, or one of its keys with parameters (TP2: the server
// sends the variant the key selects). Keys whose subscription ended do not
// count: an answer to one in flight confirms nothing, as the server, which
// forgot it, would not tell the relay of a deletion (found by the oracle,
// seed 3006725). Called with mu held.
func (tc *typeCache) subscribedUpstream(n string) bool {
	return tc.plainCovered(n) || tc.keySubscribed(n)
}

// plainCovered reports whether the name's own subscription, the wildcard's
// (the default authority's names) or its glob collection's covers n.
// Called with mu held.
func (tc *typeCache) plainCovered(n string) bool {
	if tc.up[n] {
		return true
	}
	if a, _ := keying.Authority(n); a == "" && tc.up[keying.Wildcard] {
		return true
	}
	g := keying.GlobOf(n)
	return g != "" && tc.up[g]
}

// keySubscribed reports whether one of n's keys with parameters is
// subscribed upstream. Called with mu held.
func (tc *typeCache) keySubscribed(n string) bool {
	for k := range tc.params[n] {
		if tc.up[k] {
			return true
		}
	}
	return false
}

// selectionCovered reports whether a subscription covers the variant that
// is n's plain selection in res: n's own, the wildcard's, its glob's (or n
// is another authority's), or a subscribed key of n that selects the same
// variant. Called with mu held.
func (tc *typeCache) selectionCovered(n string, res map[string]*downstream.Resource, authority string) bool {
	if tc.plainCovered(n) || !ofAuthority(n, authority) {
		return true
	}
	sel := res[n]
	for k := range tc.params[n] {
		if ks, ok := res[k]; ok && tc.up[k] && ks.Root() == sel.Root() {
			return true
		}
	}
	return false
}

// publish makes v the type's current View and updates the cache gauges.
// Called with mu held.
func (r *Relay) publish(tc *typeCache, v *downstream.View) {
	before := tc.bytes
	for name := range v.Changed {
		if cur, ok := tc.view.Resources[name]; ok {
			tc.bytes -= len(cur.Any)
		}
		if nr, ok := v.Resources[name]; ok {
			tc.bytes += len(nr.Any)
		}
	}
	tl := metrics.TypeLabel(tc.typeURL)
	r.m.CacheResources.WithLabelValues(tl).Add(float64(len(v.Resources) - len(tc.view.Resources)))
	tc.view = v
	if r.persist != nil && tc.sc == r.shared {
		r.persist.touch()
	}
	r.m.CacheBytes.WithLabelValues(tl).Add(float64(tc.bytes - before))
}

func marshalDeterministic(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
