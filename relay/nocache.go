package relay

import (
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// Resource.cache_control.do_not_cache: an xDS proxy may not cache such a
// resource. The shared (or group) scope never stores one: when one arrives,
// every stream that watches it gets that type from its node's own scope
// from then on — its own upstream subscription, presenting its own node —
// and so does every later subscriber to it. A whole type moves, not just the
// name, because a SotW LDS/CDS response carries the type's full state and is
// built from one cache. In the own scope the resource is held only while the
// node watches it: it is dropped, and unsubscribed upstream, with its last
// watcher (no linger, no LRU), and never persisted.

// wantsOwn reports whether the subscription change c of a stream in tc's
// (shared or group) scope must be served from the stream's own scope.
func (tc *typeCache) wantsOwn(c downstream.Change) bool {
	if tc == nil || (tc.noCaches == 0 && !tc.noCacheWild) {
		return false
	}
	if c.Wildcard != nil && *c.Wildcard && tc.noCacheWild {
		return true
	}
	for _, k := range c.Add {
		if name, _ := keying.SplitSubscriptionKey(k); tc.get(name).noCache {
			return true // (a key with TP2 parameters too)
		}
	}
	return false
}

// withholdsWildcard reports whether a do_not_cache resource of the default
// authority, or one the default servers listed, which a shared or group
// scope does not store, may be in the wildcard set.
func (tc *typeCache) withholdsWildcard() bool {
	if tc.noCacheWild {
		return true
	}
	if tc.noCaches == 0 {
		return false
	}
	for name, known := range tc.names {
		if auth, _ := keying.Authority(name); known.noCache && auth == "" {
			return true
		}
	}
	return false
}

// markNoCache marks name do_not_cache (see entry.noCache).
func (tc *typeCache) markNoCache(name string) {
	if e := tc.entry(name); !e.noCache {
		e.noCache = true
		tc.noCaches++
	}
}

// clearNoCache forgets that name is do_not_cache: its subscription ended.
func (tc *typeCache) clearNoCache(name string) {
	if e := tc.names[name]; e != nil && e.noCache {
		e.noCache = false
		tc.noCaches--
		tc.tidy(name)
	}
}

// moveNoCache moves the watchers of the do_not_cache names of tc (a shared
// or group scope), and its wildcard watchers when one of them is in the
// wildcard set of a full-state type (noCacheWild: the default servers sent
// it), to their own scopes; each is notified
// of tc's View first. Called after tc's View is published and
// before it is notified.
func (s *state) moveNoCache(tc *typeCache, names []string) {
	if len(names) == 0 {
		return
	}
	moving := make(map[uint64]struct{})
	add := func(ws *watcherSet) {
		for id := range ws.all {
			moving[id] = struct{}{}
		}
	}
	for _, n := range names {
		add(tc.watchers[n])
		for k := range tc.get(n).params {
			add(tc.watchers[k]) // its subscriptions with TP2 parameters
		}
	}
	if tc.noCacheWild {
		add(tc.wild)
	}
	for id := range moving {
		if w := s.watcher(id); w != nil {
			// The update that moves it still reaches it: what else it
			// changed (a removal in the same response) would be lost.
			s.tell(w, delivery{v: tc.view})
			s.moveToOwn(w, tc.typeURL)
		}
	}
}

// moveToOwn moves w's subscription of typeURL from its group scope to its
// node's own scope. The own View is seeded with what the stream already has,
// so that it is never told of a deletion in between; the own upstream
// subscriptions replace it.
func (s *state) moveToOwn(w downstream.Watcher, typeURL string) {
	b := s.bound[w.ID()]
	if b == nil || b.ownTypes[typeURL] {
		return
	}
	if b.ownTypes == nil {
		b.ownTypes = make(map[string]bool)
	}
	b.ownTypes[typeURL] = true
	s.log.Debug("a do_not_cache resource: the stream gets the type from its node's own scope",
		zap.String("node", b.node.GetId()), zap.String("type", typeURL))
	to := s.ownScope(b).typeCache(typeURL)
	from := b.group.types[typeURL]
	if from == nil {
		return
	}
	var names []string
	for n, ws := range from.watchers {
		if ws.has(w) {
			names = append(names, n)
		}
	}
	wild := from.wild.has(w)

	seed := editOf(to.view)
	add := func(n string, rs *downstream.Resource) {
		if _, ok := seed.res[n]; !ok && !from.get(n).noCache {
			seed.put(n, rs)
			seed.change(n)
		}
	}
	for _, n := range names {
		if rs, ok := from.view.Resources[n]; ok {
			add(n, rs)
		}
	}
	if wild {
		for n, rs := range from.view.Resources {
			// Not another authority's name the default servers list: the
			// own scope's stream of that authority would tell its server
			// the relay holds it, and a glob collection of it, whose
			// server then says nothing, would never count as answered.
			if rs.Authority == "" && n == rs.Name {
				add(n, rs)
			} else if rs.Listed && n == rs.Name {
				// Changed all the same, so that the stream looks at it
				// again: once the own wildcard set is whole, a name it
				// does not list is gone for a client that held it
				// through the wildcard alone.
				seed.change(n)
			}
		}
	}
	// The seed lacks the do_not_cache resources themselves: the own View is
	// not the complete wildcard set until its own upstream answers. The
	// stream is told of the seed: it may carry what the stream was not sent
	// yet (what arrived with the do_not_cache resource that moves it), and
	// the own upstream, told the relay holds it, will not send it again.
	if len(seed.changed) > 0 {
		v := seed.view(s.nextSeq())
		s.publish(to, v)
		s.tell(w, delivery{v: v})
	}

	if wild {
		names = append(names, keying.Wildcard)
	}
	for _, n := range names {
		// Asked upstream as the group asked for it: the client's spelling
		// (control planes match names exactly), which no Change carries here.
		if c := from.clientFor(n); c != nil {
			to.spelling = c.Spelling(from.typeURL, n)
		}
		s.unwatchKey(from, n, w.ID())
		s.watchKey(to, n, w.ID())
		to.spelling = ""
	}
}

// dropNow ends a do_not_cache resource's last watch in an own scope: it is
// unsubscribed upstream and dropped from the View at once.
func (s *state) dropNow(tc *typeCache, name string) {
	delete(tc.up, name)
	tc.clearNoCache(name)
	if c := tc.clientFor(name); c != nil {
		c.Unsubscribe(tc.typeURL, name)
		// Dropped: should it be subscribed again before the unsubscription
		// goes out, the server, which never hears of either, must still
		// send it again.
		c.Forget(tc.typeURL, name)
		auth, _ := keying.Authority(name)
		s.m.UpstreamRequests.WithLabelValues(auth, "unsubscribe").Inc()
	}
	if _, ok := tc.view.Resources[name]; !ok {
		return
	}
	e := editOf(tc.view)
	e.drop(name)
	tc.clearUnsure(name)
	e.change(name)
	s.publish(tc, e.view(s.nextSeq()))
}
