package relay

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

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
	if !ws.add(id) {
		return false
	}
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
	if !ws.remove(id) {
		return false
	}
	if ws.len() == 0 {
		if key != keying.Wildcard {
			delete(tc.watchers, key)
		}
		s.release(tc, key)
	}
	return true
}

// clientFor returns the upstream client that serves name in tc's scope, or
// nil when its authority is not configured.
func (tc *typeCache) clientFor(name string) *upstream.Client {
	auth, _ := keying.Authority(name)
	return tc.sc.upstreams[auth]
}

// ref is called when name gets its first watcher.
func (s *state) ref(tc *typeCache, name string) {
	delete(tc.linger, name) // (its linger, shared with the names released with it, ends it no more)
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
	// As the client that asked first spelled it: control planes match names
	// exactly. The upstream client speaks canonical names otherwise.
	c.Subscribe(tc.typeURL, cmp.Or(tc.spelling, name))
	// A new subscription gets the whole wait: one still running from an
	// earlier subscription would take it for deleted before the server could
	// answer this one.
	tc.stopWait(name)
	s.armUnknown(tc, name)
	if name == keying.Wildcard || keying.IsGlob(name) {
		for n, known := range tc.names {
			if res, ok := tc.view.Resources[n]; ok && known.unsure() && inSet(res, name) {
				if !tc.up[n] {
					// (A wait of its own subscription runs on: wildcard
					// clients coming and going must not put it off.)
					tc.stopWait(n)
				}
				s.armUnknown(tc, n) // the wildcard (the glob) brings it again if it exists
			}
		}
	}
	auth, _ := keying.Authority(name)
	s.m.UpstreamRequests.WithLabelValues(auth, "subscribe").Inc()
}

// release is called when name lost its last watcher: it is unsubscribed
// upstream after the linger. The names released under one hold of the lock
// (one stream request) share one linger and leave the upstream together: a
// client that drops ten thousand names costs one upstream request, not one
// each.
func (s *state) release(tc *typeCache, name string) {
	if !tc.up[name] {
		s.unreferenced(tc, name)
		return
	}
	if tc.sc.own && tc.get(name).noCache {
		s.dropNow(tc, name) // do_not_cache: never kept
		return
	}
	l := tc.releasing
	if l == nil || l.hold != s.holds {
		l = &lingerEntry{hold: s.holds}
		l.timer = time.AfterFunc(s.linger, func() { s.expire(tc, l) })
		tc.releasing = l
	}
	l.names = append(l.names, name)
	tc.linger[name] = l
}

// expire ends a linger: its names no stream subscribed again meanwhile are
// unsubscribed upstream, in one call per upstream client, and their cached
// values become unreferenced.
func (s *state) expire(tc *typeCache, l *lingerEntry) {
	s.relay.lock()
	defer s.unlock()
	if s.closed || s.scopes[tc.sc.key] != tc.sc {
		return
	}
	if tc.releasing == l {
		tc.releasing = nil
	}
	var names []string
	leaving := make(map[*upstream.Client][]string)
	for _, name := range l.names {
		if tc.linger[name] != l {
			continue // subscribed again (or listed twice)
		}
		delete(tc.linger, name)
		names = append(names, name)
		if c := tc.clientFor(name); c != nil {
			leaving[c] = append(leaving[c], name)
			auth, _ := keying.Authority(name)
			s.m.UpstreamRequests.WithLabelValues(auth, "unsubscribe").Inc()
		}
	}
	// Unsubscribed before ended marks what they covered unsure: a sender
	// that ran in between would otherwise ask for the wildcard's members,
	// forgotten while the wildcard was still on.
	for c, gone := range leaving {
		c.Unsubscribe(tc.typeURL, gone...)
	}
	for _, name := range names {
		s.ended(tc, name)
	}
	for c, gone := range leaving {
		// Unsure from now on (ended): should one be subscribed again before
		// the unsubscription goes out, the server, which never hears of
		// either, must still send it again to confirm it. (The wildcard's
		// members: unsureWildcardMembers.)
		c.Forget(tc.typeURL, slices.DeleteFunc(gone, func(n string) bool { return n == keying.Wildcard })...)
	}
	if len(names) == 0 {
		return
	}
	s.evict()
	s.staleEnded(tc, names)
	s.settleAside(tc)
	s.showUnsure(tc)
}

// ended: name's upstream subscription ends (its client unsubscribes it after
// this, with the names that lingered with it): what it covered stays cached,
// unreferenced and unsure.
func (s *state) ended(tc *typeCache, name string) {
	delete(tc.up, name)
	// A later subscriber of the name tries the shared cache again. Not so a
	// later wildcard subscriber: a Delta server does not resend what it sent
	// under a dropped wildcard when it is subscribed again, and the shared
	// cache never stored the do_not_cache resources, so they would never
	// arrive to move it to its own scope.
	tc.clearNoCache(name)
	if name == keying.Wildcard {
		s.unsureWildcardMembers(tc)
	}
	s.forgetGlobSet(tc, name)
	s.unsureGlobMembers(tc, name)
	s.unpin(tc, name) // (expire evicts, once for all its names)
	if _, cached := tc.view.Resources[name]; !cached {
		tc.dropParamKey(name)
	}
	// Unsure also when the wildcard still covers it: a Delta server forgets
	// a name unsubscribed and sends it again under the wildcard, which
	// confirms it — unless the wildcard ended as well before it did, and the
	// name was deleted upstream meanwhile. For a TP2 key, its name's plain
	// selection (what the wildcard gets): the variants the key's
	// subscription kept current are no longer confirmed; forgotten too, so that a server that keeps
	// what it sent confirms it as well (the key is forgotten by expire).
	// Another authority's name the default servers' wildcard lists is theirs
	// instead (leftToDefaultServers).
	base, _ := keying.SplitSubscriptionKey(name)
	if _, cached := tc.view.Resources[name]; cached && base != name {
		tc.markUnsure(name) // the variant it selects, kept current by its subscription until now
	}
	if res, cached := tc.view.Resources[base]; cached && !tc.up[base] {
		switch {
		case !tc.leftToDefaultServers(base, res):
			tc.markUnsure(base)
		case res.Listed:
			s.handToDefaultServers(tc, []*downstream.Resource{res})
		}
		if c := tc.clientFor(base); c != nil && base != name {
			c.Forget(tc.typeURL, base)
		}
	}
}

// staleEnded: the names are no longer subscribed, so what the upstream said
// of them goes stale — that they do not exist, or (the wildcard) that the
// cache holds the whole set — and so does what its silence said
// (View.Unfound) and the relay's own UNAVAILABLE: it would keep a name
// missing from the complete wildcard set from counting as gone (View.Gone).
// One View for them all.
func (s *state) staleEnded(tc *typeCache, names []string) {
	e := editOf(tc.view)
	edited, incomplete, unreachable := false, false, false
	for _, name := range names {
		_, absent := tc.view.Absent[name]
		_, unfound := tc.view.Unfound[name]
		wild := name == keying.Wildcard && tc.view.Complete
		unreach := tc.get(name).unreachable()
		if !absent && !unfound && !wild && !unreach {
			continue
		}
		edited, incomplete, unreachable = true, incomplete || wild, unreachable || unreach
		e.unmarkAbsent(name)
		e.markUnfound(name, false)
		if unreach {
			e.change(name)
			e.clearError(name)
			tc.clearUnreachable(name)
		}
	}
	if !edited {
		return
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

// unsureWildcardMembers: the wildcard's upstream subscription ended, and what
// only it covered stays cached (unreferenced) but unsure: nothing tells the
// relay of its deletion any more. So too another authority's name the
// default servers list (Resource.Listed), unless its glob collection is
// still subscribed: its own stream no longer confirms it either, and the
// default servers, which think the relay holds it, would not send it again. Named later, it is served as cached until the upstream
// sends it again or says it is gone — on a SotW stream a response without it
// proves nothing, as the name was not in the type's first request, so once
// upstream.does_not_exist_after passes the relay asks on a new stream
// (armUnknown); silence removes nothing.
// On Delta it is forgotten too
// (upstream.Client.Forget). What a Delta server keeps of it is no help:
// go-control-plane forgets it silently once it answers a name still
// subscribed — it would neither send it nor say it is gone when "*" comes
// back, and a deletion meanwhile never reached the cache (it stayed in the
// wildcard set for good) — while another server keeps it and never sends it
// again. When "*" is subscribed again the upstream client makes the server
// send each again or say it is gone (a SotW server answers "*" with the whole
// set); what it says nothing of stays.
func (s *state) unsureWildcardMembers(tc *typeCache) {
	c := tc.clientFor(keying.Wildcard)
	if c == nil {
		return
	}
	var forget []string
	for n, res := range tc.view.Resources {
		if n != res.Name || !res.InWildcard() || tc.up[n] {
			continue // a TP2 selection, another authority's not listed, or subscribed by name
		}
		if !tc.globCovered(n) { // (its glob's stream still tells the relay of its deletion)
			tc.markUnsure(n)
		}
		forget = append(forget, n)
	}
	if len(forget) > 0 {
		c.Forget(tc.typeURL, forget...) // (nothing on SotW)
	}
}

// forgetGlobSet: the glob collection's upstream subscription ended, so what
// the upstream said of its set goes stale — that it answered the set, and
// that members only the glob covered do not exist.
func (s *state) forgetGlobSet(tc *typeCache, glob string) {
	if !keying.IsGlob(glob) {
		return
	}
	s.askListedAbsent(tc, glob)
	if !tc.view.GlobAnswered(glob) && len(tc.view.Absent) == 0 {
		return
	}
	e := editOf(tc.view)
	stale := tc.view.GlobAnswered(glob)
	e.unanswerGlob(glob)
	for n := range tc.view.Absent {
		if !tc.up[n] && keying.GlobOf(n) == glob {
			e.unmarkAbsent(n)
			stale = true
		}
	}
	if stale {
		s.publish(tc, e.view(s.nextSeq()))
	}
}

// askListedAbsent: the glob's subscription ended, so the default servers'
// listings of its members that were not stored while it said they were gone
// (listsAbsent) are their word again. A Delta server thinks the relay holds
// them: it is made to send them again, or say they are gone.
func (s *state) askListedAbsent(tc *typeCache, glob string) {
	var ask []string
	for n, en := range tc.names {
		if en.listedAbsent && keying.GlobOf(n) == glob {
			en.listedAbsent = false
			tc.tidy(n)
			ask = append(ask, n)
		}
	}
	if c := tc.sc.upstreams[""]; c != nil && len(ask) > 0 {
		c.Forget(tc.typeURL, ask...)
	}
}

// lingerEntry is the linger of the names released under one hold of the
// lock (release); a name subscribed again leaves tc.linger, not names.
type lingerEntry struct {
	timer *time.Timer
	hold  uint64 // state.holds when they were released
	names []string
}

func (tc *typeCache) lruKey(name string) lruKey {
	return lruKey{scope: tc.sc.key, Key: keying.Key{TypeURL: tc.typeURL, Name: name}}
}
