package relay

import (
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

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

// unreferenced puts what name no longer pins into the LRU (unpin) and
// evicts what the LRU pushes out.
func (s *state) unreferenced(tc *typeCache, name string) {
	s.unpin(tc, name)
	s.evict()
}

// unpin puts what name no longer pins into the LRU — the name, or the
// resources of the wildcard or of a glob collection that nothing else pins.
// The caller evicts (evict): once for many names, one new View.
func (s *state) unpin(tc *typeCache, name string) {
	if name != keying.Wildcard && !keying.IsGlob(name) {
		// A name pins only itself: no pass over the View (a client may
		// release ten thousand names at once).
		if res, ok := tc.view.Resources[name]; ok && !tc.pinned(name, res) {
			s.unref.add(tc.lruKey(name))
		}
		return
	}
	for n, res := range tc.view.Resources {
		if n != name && (n != res.Name || !((name == keying.Wildcard && res.InWildcard()) || res.Glob == name)) {
			continue
		}
		if !tc.pinned(n, res) {
			s.unref.add(tc.lruKey(n))
		}
	}
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
				// names, and a set taken for incomplete leaves Delta wildcard
				// clients unanswered when the upstream has nothing new.)
				complete = false
			}
			e.drop(n)
			tc.clearUnsure(n)
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
			case len(tc.get(n).params) == 0:
				tc.leaveVariantMode(n) // nothing selects its variants any more
			case tc.variantMode(n):
				// The plain selection of a name whose keys with parameters
				// stay: the variant it was goes too, unless one of them
				// selects it. Else the next change of another variant would
				// select it again — evicted, forgotten upstream, never
				// confirmed — and a deletion upstream never reached it.
				root, shared := old.Resources[n].Root(), false
				for k := range tc.get(n).params {
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
