package relay

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// typeCache is one type in one scope, in three parts: who wants a name (the
// registry: watchers, wild, up, linger), what the relay knows of it and why
// (names, one entry per name: entry.go), and what it publishes (view, the
// immutable View streams read). It is reached only through the state
// (Relay.lock), so its methods run with the lock held.
type typeCache struct {
	sc      *scope
	typeURL string
	// view is the current published View; replaced, never modified.
	view *downstream.View

	// Who wants a name: the registry (subscribe.go, source.go).

	// watchers holds, per name, the streams that subscribe to it by name, by
	// stream id (integer keys hash faster than interfaces on the hot path).
	watchers map[string]*watcherSet
	// wild holds the streams with a wildcard subscription.
	wild *watcherSet
	// up holds the names (and keying.Wildcard) subscribed upstream.
	up map[string]bool
	// spelling, while Watch adds a name a client wrote otherwise (an xdstp
	// name not in canonical form), is that spelling: an upstream
	// subscription made for the name now uses it (ref). Empty otherwise.
	spelling string
	// linger holds the pending unsubscriptions of names no stream watches;
	// releasing is the linger the names released under the current hold of
	// the lock join (release).
	linger    map[string]*lingerEntry
	releasing *lingerEntry
	// arming is the does-not-exist wait the names armed under the current
	// hold of the lock join (armUnknown).
	arming *unknownWait

	// What the relay knows of a name, and why.

	// names holds, per name, what the relay knows of it besides the View
	// (entry.go); a name it knows nothing more of has no entry.
	names map[string]*entry
	// noCaches counts the entries marked noCache (a quick "none" on the
	// Watch path); noCacheWild says that one of them is in the wildcard set
	// (nocache.go).
	noCaches    int
	noCacheWild bool
	// asides counts the entries with a listing kept aside (a quick "none"
	// for settleAside).
	asides int
	// ro is the pending guarded rollout of this type, if any.
	ro *rollout
	// unconfirmed holds the authorities whose data in the View no upstream
	// response confirmed since their stream (re)started or the relay loaded
	// its warm-restart file (published as View.Unconfirmed).
	unconfirmed map[string]bool
	// unsure holds the names in wordUnsure, published as View.Unsure and
	// shared with the Views once published (unsureShared: copy it before
	// a change); unsureMoved: it changed since tc.view was published.
	unsure       map[string]struct{}
	unsureShared bool
	unsureMoved  bool
	// sured are the unsure names the upstream confirmed since the last
	// View: their watchers look again (tellSured).
	sured []string
	// declaring holds the unsure names a Delta stream's first request
	// declared, by authority, until the server answers it (declaredAnswered).
	declaring map[string]string
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

// publish makes v the type's current View, with the names unsure now
// (View.Unsure).
func (s *state) publish(tc *typeCache, v *downstream.View) {
	v.Unsure, tc.unsureShared, tc.unsureMoved = tc.unsure, true, false
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
