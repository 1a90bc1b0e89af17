package relay

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// typeCache is the cache and the registry of one type in one scope. It is
// reached only through the state (Relay.lock), so its methods run with the
// lock held.
type typeCache struct {
	sc      *scope
	typeURL string
	// view is the current published View; replaced, never modified.
	view *downstream.View

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

func (h *upstreamHandler) OnState(server string, connected bool, err error) {
	s := h.r.lock()
	h.sc.connected[h.authority] = connected
	if connected {
		s.rearmUnknown(h.sc, h.authority)
	} else {
		s.unconfirm(h.sc, h.authority)
	}
	s.unlock()
	if !connected {
		h.r.m.UpstreamReconnects.WithLabelValues(h.authority, server).Inc()
	}
	if err != nil {
		h.r.log.Info("upstream disconnected", zap.String("authority", h.authority), zap.String("server", server), zap.Error(err))
	}
}

// unconfirm marks the data of authority in the Views of sc that hold some
// unconfirmed (View.Unconfirmed): its upstream stream is gone. Nobody is
// notified: the View serves as before (fail static) but tells no client that
// held config elsewhere that any of it is gone.
func (s *state) unconfirm(sc *scope, authority string) {
	for _, tc := range sc.types {
		if tc.unconfirmed[authority] || !tc.holds(authority) {
			continue
		}
		if tc.unconfirmed == nil {
			tc.unconfirmed = make(map[string]bool)
		}
		tc.unconfirmed[authority] = true
		v := editOf(tc.view).view(s.nextSeq())
		v.Unconfirmed = maps.Clone(tc.unconfirmed)
		s.publish(tc, v)
	}
}

// holds reports whether tc caches or subscribes anything of authority.
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

// nextSeq returns a new View sequence number: relay-wide, so Views of
// different scopes compare in publication order.
func (s *state) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// notifyEvery tells every stream that watches something of tc of v.
func (s *state) notifyEvery(tc *typeCache, v *downstream.View) {
	s.fan.add(delivery{to: s.watchersOf(tc, slices.Collect(maps.Keys(tc.watchers))), v: v})
}

// notify tells the streams that watch a changed name (or the wildcard) of v,
// once each. The streams are told outside the lock, in order
// (fanout.go).
func (s *state) notify(tc *typeCache, v *downstream.View) {
	names := append(slices.Collect(maps.Keys(v.Changed)), slices.Collect(maps.Keys(v.Heartbeats))...)
	s.fan.add(delivery{to: s.watchersOf(tc, names), v: v})
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
// the wildcard.
func (s *state) watchersOf(tc *typeCache, names []string) []*binding {
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
		if b := s.bound[id]; b != nil {
			out = append(out, b)
		}
	}
	return out
}

// watcher returns the bound stream with id, nil if it has ended.
func (s *state) watcher(id uint64) downstream.Watcher {
	if b := s.bound[id]; b != nil {
		return b.w
	}
	return nil
}

// initialVersions returns the upstream's versions of the resources of
// typeURL the cache holds from the handler's authority: the Delta
// initial_resource_versions (the upstream client keeps those its first
// request subscribes to).
func (h *upstreamHandler) initialVersions(typeURL string) map[string]string {
	s := h.r.lock()
	defer s.unlock()
	authority := h.authority
	tc := h.sc.types[typeURL]
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
func (h *upstreamHandler) declared(typeURL string, names []string) {
	s := h.r.lock()
	defer s.unlock()
	authority := h.authority
	tc := h.sc.types[typeURL]
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
			s.armUnknown(tc, n)
		}
	}
}

// markUnsure marks the cached name unsure (see typeCache.unsure).
func (tc *typeCache) markUnsure(name string) {
	if tc.unsure == nil {
		tc.unsure = make(map[string]bool)
	}
	tc.unsure[name] = true
}

// confirmed: the upstream confirmed the cached name (it sent it, or the
// server was told the relay holds it). It is sure, and the wait for it
// (armUnknown) is over: a wait left running would take it for deleted should
// it become unsure again before its timer fires — for a question the upstream
// has already answered (found by the oracle, seed 1401575: a warm-restart
// file's cluster, confirmed, then unsure when a subscription with parameters
// of it ended).
func (tc *typeCache) confirmed(name string) {
	delete(tc.unsure, name)
	tc.stopWait(name)
}

// stopWait stops the wait for name (armUnknown), if one runs.
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
// plain name n: its own, the wildcard's (the default authority's names), its
// glob collection's, or one of its keys with parameters (TP2: the server
// sends the variant the key selects). Keys whose subscription ended do not
// count: an answer to one in flight confirms nothing, as the server, which
// forgot it, would not tell the relay of a deletion (found by the oracle,
// seed 3006725).
func (tc *typeCache) subscribedUpstream(n string) bool {
	return tc.plainCovered(n) || tc.keySubscribed(n)
}

// plainCovered reports whether the name's own subscription, the wildcard's
// (the default authority's names) or its glob collection's covers n.
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

// keySubscribed reports whether one of n's keys with parameters is subscribed
// upstream.
func (tc *typeCache) keySubscribed(n string) bool {
	for k := range tc.params[n] {
		if tc.up[k] {
			return true
		}
	}
	return false
}

// selectionCovered reports whether a subscription covers the variant that is
// n's plain selection in res: n's own, the wildcard's, its glob's (or n is
// another authority's), or a subscribed key of n that selects the same
// variant.
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

// publish makes v the type's current View.
func (s *state) publish(tc *typeCache, v *downstream.View) {
	tc.view = v
	if s.persist != nil && tc.sc == s.shared {
		s.persist.touch()
	}
}

// cacheSizes returns, per scope and type, what the cache holds: the
// samples of xds_relay_cache_resources and xds_relay_cache_bytes.
func (r *Relay) cacheSizes() []metrics.CacheSize {
	s := r.lock()
	defer s.unlock()
	var out []metrics.CacheSize
	for _, sc := range s.scopes {
		for _, tc := range sc.types {
			size := metrics.CacheSize{TypeURL: tc.typeURL, Resources: len(tc.view.Resources)}
			for _, res := range tc.view.Resources {
				size.Bytes += len(res.Any)
			}
			out = append(out, size)
		}
	}
	return out
}

func marshalDeterministic(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
