package relay

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// Bind implements downstream.Source: it puts the stream in its node group's
// scope (the shared one without keying.group_by).
func (r *Relay) Bind(w downstream.Watcher, node *corev3.Node) error {
	s := r.lock()
	defer s.unlock()
	if s.closed {
		return nil
	}
	sc := s.shared
	if key := groupKey(r.groupBy, node); key != "" {
		if sc = s.scopes["group:"+key]; sc == nil {
			sc = s.newScope("group:"+key, groupNode(r.node, r.groupBy, node, key), false)
		}
	}
	sc.streams++
	if sc.idle != nil {
		sc.idle.Stop() // a client is back: the group stays
		sc.idle = nil
	}
	s.bound[w.ID()] = &binding{w: w, node: node, group: sc}
	return nil
}

// Cancel implements downstream.Source: the stream has ended. A node's own
// scope whose last stream ended is closed: nothing of it is kept.
func (r *Relay) Cancel(w downstream.Watcher) {
	s := r.lock()
	b := s.bound[w.ID()]
	delete(s.bound, w.ID())
	var clients []*upstream.Client
	if b != nil {
		if b.group.streams--; b.group.streams == 0 && b.group != s.shared {
			s.releaseLater(b.group)
		}
		if own := b.own; own != nil {
			if own.streams--; own.streams == 0 {
				clients = s.stopScope(own)
				delete(s.scopes, own.key)
			}
		}
	}
	s.unlock()
	for _, c := range clients {
		c.Close()
	}
}

// releaseLater closes a node group's scope, and its upstream streams, a
// linger after its last stream ended, unless a stream of the group binds
// again meanwhile. Its cache goes with it.
func (s *state) releaseLater(sc *scope) {
	var t *time.Timer
	t = time.AfterFunc(s.linger, func() {
		s.relay.lock()
		if s.closed || sc.idle != t || sc.streams > 0 || s.scopes[sc.key] != sc {
			s.unlock()
			return
		}
		clients := s.stopScope(sc)
		delete(s.scopes, sc.key)
		s.unlock()
		s.log.Debug("node group released", zap.String("scope", sc.key))
		for _, c := range clients {
			c.Close()
		}
	})
	sc.idle = t
}

// stopScope stops a scope's timers and returns its upstream clients for the
// caller to close after unlocking.
func (s *state) stopScope(sc *scope) []*upstream.Client {
	if sc.idle != nil {
		sc.idle.Stop()
	}
	for _, tc := range sc.types {
		for _, l := range tc.linger {
			l.timer.Stop()
		}
		if tc.ro != nil {
			tc.ro.timer.Stop()
		}
		for _, t := range tc.unavail {
			t.Stop()
		}
		tc.stopTTLs()
	}
	clients := make([]*upstream.Client, 0, len(sc.upstreams))
	for _, c := range sc.upstreams {
		clients = append(clients, c)
	}
	return clients
}

// Watch implements downstream.Source. It notifies w under mu when something
// was added (or removed from a wildcard-capable type), so that the View it
// hands over is ordered with every later update.
func (r *Relay) Watch(w downstream.Watcher, typeURL string, c downstream.Change) {
	add, remove, wildcard := c.Add, c.Remove, c.Wildcard
	s := r.lock()
	defer s.unlock()
	if s.closed {
		return
	}
	sc := s.scopeOf(w, typeURL)
	if !sc.own && sc.types[typeURL].wantsOwn(c) {
		s.moveToOwn(w, typeURL) // it asks for a do_not_cache resource
		sc = s.scopeOf(w, typeURL)
	}
	tc := sc.typeCache(typeURL)
	var force []string
	hits := 0
	defer func() {
		if len(add) > 0 {
			tl := metrics.TypeLabel(typeURL)
			r.m.CacheLookups.WithLabelValues(tl, "hit").Add(float64(hits))
			r.m.CacheLookups.WithLabelValues(tl, "miss").Add(float64(len(add) - hits))
		}
	}()
	for _, name := range add {
		force = append(force, name) // (asked again: send it again)
		if !s.watchKey(tc, name, w.ID()) {
			continue
		}
		if _, ok := tc.view.Resources[name]; ok {
			hits++
		}
	}
	for _, name := range remove {
		if !s.unwatchKey(tc, name, w.ID()) {
			continue
		}
		if keying.WildcardCapable(typeURL) {
			// xDS (Delta): unsubscribing a name the wildcard may cover is
			// answered with the resource or its removal.
			force = append(force, name)
		}
	}
	if wildcard != nil {
		// Its end too is answered by the stream (Delta: removals of what
		// only the wildcard covered).
		if *wildcard && s.watchKey(tc, keying.Wildcard, w.ID()) || !*wildcard && s.unwatchKey(tc, keying.Wildcard, w.ID()) {
			force = append(force, keying.Wildcard)
		}
	}
	force = append(force, c.Answer...)
	if len(force) == 0 {
		return
	}
	// Under mu, so this View is ordered with every later update.
	tell := func(d delivery) { s.tell(w, d) }
	if ro := tc.ro; ro != nil && !ro.isCanary(w) && ro.watches(w) && !ro.held[w] {
		// A new subscriber during a rollout gets the accepted versions now
		// and the rolled-out ones if the rollout is released. (A stream that
		// holds the barrier already is answered behind it, from the current
		// View: released, or reverted if the rollout halts.)
		ro.mu.Lock()
		accepted := revertView(tc.view, ro.accepted, ro.names)
		ro.mu.Unlock()
		tell(delivery{v: accepted, force: force})
		if ro.hold(w) {
			tell(delivery{v: tc.view, ro: ro})
		}
		return
	}
	tell(delivery{v: tc.view, force: force})
}

// watchKey adds the stream id to the watchers of key (of the wildcard for
// keying.Wildcard) and reports whether it was not one yet; the first watcher
// references the key (ref).
func (s *state) watchKey(tc *typeCache, key string, id uint64) bool {
	ws := tc.wild
	if key != keying.Wildcard {
		if ws = tc.watchers[key]; ws == nil {
			ws = &watcherSet{}
			tc.watchers[key] = ws
		}
	}
	if ws.contains(id) {
		return false
	}
	ws.add(id)
	if ws.len() == 1 {
		s.ref(tc, key)
	}
	return true
}

// unwatchKey removes the stream id from the watchers of key and reports
// whether it was one; the last watcher leaving releases the key (release).
func (s *state) unwatchKey(tc *typeCache, key string, id uint64) bool {
	ws := tc.wild
	if key != keying.Wildcard {
		ws = tc.watchers[key]
	}
	if !ws.contains(id) {
		return false
	}
	ws.remove(id)
	if ws.len() == 0 {
		if key != keying.Wildcard {
			delete(tc.watchers, key)
		}
		s.release(tc, key)
	}
	return true
}

// tell notifies w of d now, or behind the deliveries to w still on their way
// (fanout.go), so that it never overtakes one.
func (s *state) tell(w downstream.Watcher, d delivery) {
	b := s.bound[w.ID()]
	if b == nil || b.pending.Load() == 0 {
		d.notify(w)
		return
	}
	d.to = []*binding{b}
	s.fan.add(d)
}

// clientFor returns the upstream client that serves name in tc's scope, or
// nil when its authority is not configured.
func (tc *typeCache) clientFor(name string) *upstream.Client {
	auth, _ := keying.Authority(name)
	return tc.sc.upstreams[auth]
}

// ref is called when name gets its first watcher.
func (s *state) ref(tc *typeCache, name string) {
	if l, ok := tc.linger[name]; ok {
		l.timer.Stop()
		delete(tc.linger, name)
	}
	s.referenced(tc, name)
	s.addParamKey(tc, name)
	if tc.up[name] {
		return
	}
	c := tc.clientFor(name)
	if c == nil {
		// Contract: an authority that is not configured is an error for that
		// resource (TP3 NOT_FOUND), not for the stream.
		auth, _ := keying.Authority(name)
		s.setError(tc, &downstream.ResourceError{Name: name, Code: codes.NotFound,
			Message: fmt.Sprintf("xds-relay: authority %q is not configured", auth)})
		return
	}
	tc.up[name] = true
	c.Subscribe(tc.typeURL, name)
	// A new subscription gets the whole wait: one still running from an
	// earlier subscription would take it for deleted before the server could
	// answer this one (found by a review).
	tc.stopWait(name)
	s.armUnknown(tc, name)
	if name == keying.Wildcard {
		for n := range tc.unsure {
			if res, ok := tc.view.Resources[n]; ok && res.InWildcard() {
				if !tc.up[n] {
					// (A wait of its own subscription runs on: wildcard
					// clients coming and going must not put it off.)
					tc.stopWait(n)
				}
				s.armUnknown(tc, n) // the wildcard brings it again if it exists
			}
		}
	}
	auth, _ := keying.Authority(name)
	s.m.UpstreamRequests.WithLabelValues(auth, "subscribe").Inc()
}

// armUnknown watches a name subscribed upstream that the cache knows nothing
// of. While its authority is unreachable, clients get a TP3 UNAVAILABLE error
// after UnavailableAfter (transient: they keep what they have). Once the
// upstream is connected and has answered the type, a name it still says
// nothing of after upstream.does_not_exist_after is taken as not existing — a
// SotW server tells nothing of a named resource that does not exist, and xDS
// clients conclude the same with their own does-not-exist timer — so that
// clients holding back for it (transitions) are answered.
func (s *state) armUnknown(tc *typeCache, name string) {
	if tc.unavail[name] != nil || tc.knows(name) {
		return
	}
	auth, _ := keying.Authority(name)
	d := s.cfg.Upstream.DoesNotExistAfter
	if !tc.sc.connected[auth] {
		d = s.cfg.Upstream.UnavailableAfter
	}
	var t *time.Timer
	fire := func() {
		s.relay.lock()
		defer s.unlock()
		if s.closed || s.scopes[tc.sc.key] != tc.sc || tc.unavail[name] != t {
			return
		}
		delete(tc.unavail, name)
		if tc.knows(name) || !tc.covers(name) {
			return
		}
		_, cached := tc.view.Resources[name] // unsure (see typeCache.unsure)
		switch {
		case !tc.sc.connected[auth] && cached:
			// Served as cached meanwhile (fail static).
		case !tc.sc.connected[auth]:
			if _, failed := tc.view.Errors[name]; !failed {
				s.setError(tc, &downstream.ResourceError{Name: name, Code: codes.Unavailable,
					Message: fmt.Sprintf("xds-relay: no upstream server of authority %q is reachable", auth)})
				tc.unreachable[name] = true
				s.notify(tc, tc.view)
			}
		case !tc.unconfirmed[auth]:
			e := editOf(tc.view)
			e.change(name)
			if cached {
				// The upstream did not send it again: it is gone (in TP2
				// variant mode, the variant the name selects).
				if tc.variantMode(name) {
					tc.dropVariant(name, e.res[name].Constraints)
					s.resolveVariants(tc, name, e)
				} else {
					e.drop(name)
				}
				delete(tc.unsure, name)
				s.unref.forget(tc.lruKey(name))
			}
			if tc.up[name] {
				e.markAbsent(name)
			}
			if tc.unreachable[name] {
				e.clearError(name) // the upstream is back: it is no longer unreachable
				delete(tc.unreachable, name)
			}
			v := e.view(s.nextSeq())
			s.publish(tc, v)
			s.notify(tc, v)
			return
		}
		s.armUnknown(tc, name) // not answered yet: look again later
	}
	t = time.AfterFunc(d, fire)
	tc.unavail[name] = t
}

// rearmUnknown restarts the watches of unknown names of authority in sc when
// its upstream connects: from now on the does-not-exist wait.
func (s *state) rearmUnknown(sc *scope, authority string) {
	for _, tc := range sc.types {
		for name, t := range tc.unavail {
			if a, _ := keying.Authority(name); a == authority {
				t.Stop()
				delete(tc.unavail, name)
				s.armUnknown(tc, name)
			}
		}
	}
}

// knows reports whether the cache knows something of name: its resource
// (unless unsure), that it does not exist, or an error other than its own
// UNAVAILABLE.
func (tc *typeCache) knows(name string) bool {
	_, cached := tc.view.Resources[name]
	_, absent := tc.view.Absent[name]
	_, failed := tc.view.Errors[name]
	return (cached && !tc.unsure[name]) || absent || (failed && !tc.unreachable[name])
}

// covers reports whether an upstream subscription covers name: its own, or
// the wildcard's for a cached member of the wildcard set.
func (tc *typeCache) covers(name string) bool {
	if tc.up[name] {
		return true
	}
	res, ok := tc.view.Resources[name]
	return ok && tc.up[keying.Wildcard] && res.InWildcard()
}

// setError publishes a per-resource error in the type's View. Called with mu
// held; the caller notifies.
func (s *state) setError(tc *typeCache, e *downstream.ResourceError) {
	if cur, ok := tc.view.Errors[e.Name]; ok && cur.Code == e.Code && cur.Message == e.Message {
		return
	}
	edit := editOf(tc.view)
	edit.setError(e.Name, e)
	edit.change(e.Name)
	s.publish(tc, edit.view(s.nextSeq()))
}

// release is called when name lost its last watcher: it is unsubscribed
// upstream after the linger.
func (s *state) release(tc *typeCache, name string) {
	if !tc.up[name] {
		s.unreferenced(tc, name)
		return
	}
	if tc.sc.own && tc.noCache[name] {
		s.dropNow(tc, name) // do_not_cache: never kept
		return
	}
	l := &lingerEntry{}
	l.timer = time.AfterFunc(s.linger, func() { s.expire(tc, name, l) })
	tc.linger[name] = l
}

// expire ends a linger: the name is unsubscribed upstream and its cached
// value becomes unreferenced.
func (s *state) expire(tc *typeCache, name string, l *lingerEntry) {
	s.relay.lock()
	defer s.unlock()
	if s.closed || tc.linger[name] != l || s.scopes[tc.sc.key] != tc.sc {
		return
	}
	delete(tc.linger, name)
	delete(tc.up, name)
	// A later subscriber of the name tries the shared cache again. Not so a
	// later wildcard subscriber: a Delta server does not resend what it sent
	// under a dropped wildcard when it is subscribed again, and the shared
	// cache never stored the do_not_cache resources, so they would never
	// arrive to move it to its own scope (found by the oracle).
	delete(tc.noCache, name)
	if c := tc.clientFor(name); c != nil {
		c.Unsubscribe(tc.typeURL, name)
		// Unsure from now on (below): should it be subscribed again before
		// the unsubscription goes out, the server, which never hears of
		// either, must still send it again to confirm it. (The wildcard's
		// members: unsureWildcardMembers.)
		if name != keying.Wildcard {
			c.Forget(tc.typeURL, name)
		}
		auth, _ := keying.Authority(name)
		s.m.UpstreamRequests.WithLabelValues(auth, "unsubscribe").Inc()
	}
	if name == keying.Wildcard {
		s.unsureWildcardMembers(tc)
	}
	s.unreferenced(tc, name)
	if _, cached := tc.view.Resources[name]; !cached {
		tc.dropParamKey(name)
	}
	// Unsure also when the wildcard still covers it: a Delta server forgets
	// a name unsubscribed and sends it again under the wildcard, which
	// confirms it — unless the wildcard ended as well before it did, and the
	// name was deleted upstream meanwhile (found by the oracle, seed 302527).
	// For a TP2 key, its name's plain selection (what the wildcard gets):
	// the variants the key's subscription kept current are no longer
	// confirmed (seed 308908); forgotten too, so that a server that keeps
	// what it sent confirms it as well (the key is forgotten above).
	base, _ := keying.SplitSubscriptionKey(name)
	if _, cached := tc.view.Resources[base]; cached && !tc.up[base] {
		tc.markUnsure(base)
		if c := tc.clientFor(base); c != nil && base != name {
			c.Forget(tc.typeURL, base)
		}
	}
	// No longer subscribed: what the upstream said of it goes stale — that
	// it does not exist, or (the wildcard) that the cache holds the whole set
	// — and so does the relay's own UNAVAILABLE: it would keep a name missing
	// from the complete wildcard set from counting as gone (View.Gone).
	_, absent := tc.view.Absent[name]
	incomplete := name == keying.Wildcard && tc.view.Complete
	unreachable := tc.unreachable[name]
	if absent || incomplete || unreachable {
		e := editOf(tc.view)
		e.unmarkAbsent(name)
		if unreachable {
			e.change(name)
			e.clearError(name)
			delete(tc.unreachable, name)
		}
		v := e.view(s.nextSeq())
		if incomplete {
			v.Complete = false
		}
		s.publish(tc, v)
		if unreachable {
			s.notify(tc, v) // wildcard clients held back for it look again
		}
	}
}

// unsureWildcardMembers: the wildcard's upstream subscription ended, and what
// only it covered stays cached (unreferenced) but unsure: nothing tells the
// relay of its deletion any more. Named later, it is served as cached but
// taken for deleted unless the upstream sends it within
// upstream.does_not_exist_after (armUnknown) — on a SotW stream a response
// without it proves nothing, as the name was not in the type's first request
// (found by the oracle, seed 2200583). On Delta it is forgotten too
// (upstream.Client.Forget). What a Delta server keeps of it is no help:
// go-control-plane forgets it silently once it answers a name still
// subscribed — it would neither send it nor say it is gone when "*" comes
// back, and a deletion meanwhile never reached the cache (it stayed in the
// wildcard set for good) — while another server keeps it and never sends it
// again. When "*" is subscribed again the upstream client makes the server
// send each again or say it is gone (a SotW server answers "*" with the whole
// set); what it does not send is gone after does_not_exist_after.
func (s *state) unsureWildcardMembers(tc *typeCache) {
	c := tc.clientFor(keying.Wildcard)
	if c == nil {
		return
	}
	var forget []string
	for n, res := range tc.view.Resources {
		if n != res.Name || res.Authority != "" || tc.up[n] {
			continue // a TP2 selection, another authority's, or subscribed by name
		}
		tc.markUnsure(n)
		forget = append(forget, n)
	}
	if len(forget) > 0 {
		c.Forget(tc.typeURL, forget...) // (nothing on SotW)
	}
}

// referenced takes what a new watcher or upstream subscription of name pins
// out of the unreferenced LRU: the name, or every resource of the wildcard
// (default authority) or of a glob collection.
func (s *state) referenced(tc *typeCache, name string) {
	switch {
	case name == keying.Wildcard || keying.IsGlob(name):
		for n, res := range tc.view.Resources {
			if n == res.Name && ((name == keying.Wildcard && res.InWildcard()) || res.Glob == name) {
				s.unref.forget(tc.lruKey(n))
			}
		}
	default:
		s.unref.forget(tc.lruKey(name))
	}
}

// unreferenced puts what name no longer pins into the LRU — the name, or the
// resources of the wildcard or of a glob collection that nothing else pins —
// and evicts what the LRU pushes out.
func (s *state) unreferenced(tc *typeCache, name string) {
	for n, res := range tc.view.Resources {
		if n != name && (n != res.Name || !((name == keying.Wildcard && res.InWildcard()) || (name != "" && res.Glob == name))) {
			continue
		}
		if !tc.pinned(n, res) {
			s.unref.add(tc.lruKey(n))
		}
	}
	s.evict()
}

// pinned reports whether the cached resource res (at key in the View) must
// stay: a stream watches it — by name, by the wildcard or by its glob
// collection — or an upstream subscription still covers it (it lingers, and
// the upstream will not send it again).
func (tc *typeCache) pinned(key string, res *downstream.Resource) bool {
	if tc.watchers[key].len() > 0 || tc.up[key] {
		return true
	}
	if key != res.Name {
		return false // a TP2 selection: pinned by its own key only
	}
	if res.InWildcard() && (tc.wild.len() > 0 || tc.up[keying.Wildcard]) {
		return true
	}
	g := res.Glob
	return g != "" && (tc.watchers[g].len() > 0 || tc.up[g])
}

// evict drops the resources the LRU pushed out from their Views. Nobody
// watches them, so nobody is notified. A resource that is pinned after all is
// kept: nothing watched is ever evicted (that would tell its watchers it is
// gone); such a refusal is counted and logged, since it means the LRU was
// wrong.
func (s *state) evict() {
	keys := s.unref.take()
	if len(keys) == 0 {
		return
	}
	byType := make(map[*typeCache][]string)
	for _, k := range keys {
		sc := s.scopes[k.scope]
		if sc == nil || sc.types[k.TypeURL] == nil {
			continue // its scope was closed
		}
		tc := sc.types[k.TypeURL]
		byType[tc] = append(byType[tc], k.Name)
	}
	for tc, names := range byType {
		typeURL := tc.typeURL
		old := tc.view
		e := editOf(old)
		complete := old.Complete
		for _, n := range names {
			cur := e.res[n]
			if cur == nil {
				continue
			}
			if tc.pinned(n, cur) {
				s.m.EvictionsRefused.WithLabelValues(metrics.TypeLabel(typeURL)).Inc()
				s.log.Warn("refused to evict a watched resource from the cache", zap.String("scope", tc.sc.key),
					zap.String("type", typeURL), zap.String("name", keying.DisplayKey(n)))
				continue
			}
			if cur.InWildcard() && n == cur.Name {
				// The wildcard set has lost a member: ask upstream again. (A
				// TP2 key's selection is no member: the wildcard covers plain
				// names; taking the set for incomplete left Delta wildcard
				// clients unanswered for good — found by the oracle, seed
				// 311154.)
				complete = false
			}
			e.drop(n)
			delete(tc.unsure, n)
			e.change(n)
		}
		if len(e.changed) == 0 {
			continue
		}
		byClient := make(map[*upstream.Client][]string)
		for n := range e.changed {
			if c := tc.clientFor(n); c != nil {
				byClient[c] = append(byClient[c], n)
			}
		}
		for c, ns := range byClient {
			c.Forget(typeURL, ns...) // the upstream may think the relay still holds them
		}
		v := e.view(s.nextSeq())
		v.Complete = complete
		s.publish(tc, v)
		for n := range v.Changed {
			switch {
			case keying.HasParams(n):
				tc.dropParamKey(n)
			case len(tc.params[n]) == 0:
				delete(tc.variants, n) // nothing selects its variants any more
			case tc.variantMode(n):
				// The plain selection of a name whose keys with parameters
				// stay: the variant it was goes too, unless one of them
				// selects it. Else the next change of another variant would
				// select it again — evicted, forgotten upstream, never
				// confirmed — and a deletion upstream never reached it (found
				// by the oracle, seed 1300250).
				root, shared := old.Resources[n].Root(), false
				for k := range tc.params[n] {
					if sel, ok := v.Resources[k]; ok && sel.Root() == root {
						shared = true
					}
				}
				if !shared {
					tc.dropVariant(n, old.Resources[n].Constraints)
				}
			}
		}
		s.m.CacheEvictions.Add(float64(len(v.Changed)))
	}
}
