package relay

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// upstreamHandler receives one authority's upstream data for one scope.
type upstreamHandler struct {
	r         *Relay
	sc        *scope
	authority string
	// streams counts the state changes of the authority's upstream stream
	// (syncHook).
	streams atomic.Uint64
}

// OnState records the state of the authority's upstream stream: once it
// connects, the waits for unknown names start again; once it is gone, the
// authority's cached data is unconfirmed.
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
		if tc.speaksFor(res, authority) && res.UpstreamVersion != "" && name == res.Name && res.Constraints == "" {
			out[name] = res.UpstreamVersion
		}
	}
	return out
}

// declared: a Delta stream's first request of typeURL to authority's
// servers told the server the relay holds names, which the request
// subscribes to. A sure one is confirmed — the server now tells the relay if
// it is gone — if it is still subscribed (its subscription may have ended
// since the request was built); an unsure one stays unsure until the server
// answers the request (declaredAnswered). Of the authority's other cached
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
	// This request supersedes what an earlier stream declared.
	maps.DeleteFunc(tc.declaring, func(_, a string) bool { return a == authority })
	told := make(map[string]bool, len(names))
	for _, n := range names {
		told[n] = true
		switch {
		case !tc.subscribedUpstream(n):
		case tc.get(n).unsure():
			// Unsure until the server answers the request that declares it
			// (declaredAnswered) or says nothing for a whole wait from now
			// (silent): it may be gone or changed meanwhile.
			if tc.declaring == nil {
				tc.declaring = make(map[string]string)
			}
			tc.declaring[n] = authority
			tc.stopWait(n)
			s.armUnknown(tc, n)
		default:
			tc.confirmed(n)
		}
	}
	for n, res := range tc.view.Resources {
		if told[n] || n != res.Name || res.Constraints != "" || !tc.speaksFor(res, authority) || tc.get(n).unsure() {
			continue
		}
		tc.markUnsure(n)
		if tc.subscribedUpstream(n) {
			s.armUnknown(tc, n)
		}
	}
	s.showUnsure(tc)
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

// speaksFor reports whether authority's servers speak for the cached res:
// it came from them; it is their name held from the default servers'
// listing whose wildcard subscription has ended (see lapsedListing), which
// only they can now say is gone; or, for the default servers, another
// authority's name their subscribed wildcard lists (their copy or
// Resource.Listed), which they say is gone from their set. So one
// authority's servers speak for each cached name.
func (tc *typeCache) speaksFor(res *downstream.Resource, authority string) bool {
	switch {
	case authority != "":
		return res.Authority == authority || res.Authority == "" && ofAuthority(res.Name, authority) && !tc.up[keying.Wildcard]
	case ofAuthority(res.Name, ""):
		return res.Authority == ""
	default:
		return (res.Authority == "" || res.Listed) && tc.up[keying.Wildcard]
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

// markUnsure: the cached name's value is not confirmed (wordUnsure).
func (tc *typeCache) markUnsure(name string) {
	tc.entry(name).word = wordUnsure
	tc.setUnsure(name, true)
}

// setUnsure adds name to, or removes it from, the unsure names the next
// View publishes (View.Unsure).
func (tc *typeCache) setUnsure(name string, on bool) {
	if _, ok := tc.unsure[name]; ok == on {
		return
	}
	if tc.unsureShared || tc.unsure == nil {
		tc.unsure, tc.unsureShared = maps.Clone(tc.unsure), false
		if tc.unsure == nil {
			tc.unsure = make(map[string]struct{})
		}
	}
	tc.unsureMoved = true
	if on {
		tc.unsure[name] = struct{}{}
		return
	}
	delete(tc.unsure, name)
}

// showUnsure publishes the unsure names when they changed since the View
// was (a stream answers a new subscription from tc.view at once), and tells
// the watchers of those sured meanwhile.
func (s *state) showUnsure(tc *typeCache) {
	if tc.unsureMoved {
		s.publish(tc, editOf(tc.view).view(s.nextSeq()))
	}
	s.tellSured(tc, tc.view)
}

// tellSured delivers v to the watchers of the names the upstream confirmed
// unchanged since the last View (v's changes reach theirs anyway): a stream
// that held back its client's copy (View.Doubtful) sends the View's now.
func (s *state) tellSured(tc *typeCache, v *downstream.View) {
	sured := slices.DeleteFunc(tc.sured, func(n string) bool { _, changed := v.Changed[n]; return changed })
	tc.sured = nil
	if len(sured) > 0 {
		s.fan.add(delivery{to: s.watchersOf(tc, sured), v: v})
	}
}

// markUnreachable: the name's error is the relay's own UNAVAILABLE
// (wordUnreachable).
func (tc *typeCache) markUnreachable(name string) {
	tc.setUnsure(name, false)
	tc.entry(name).word = wordUnreachable
}

// confirmed: the upstream confirmed the cached name (it sent it, or the
// server was told the relay holds it): it is not unsure. The wait for it
// (armUnknown) is over: a wait left running would take it for deleted should
// it become unsure again before its timer fires — for a question the upstream
// has already answered. (The relay's own error leaves with the error:
// clearUnreachable.)
func (tc *typeCache) confirmed(name string) {
	if tc.get(name).unsure() {
		tc.sured = append(tc.sured, name)
	}
	tc.clearUnsure(name)
	tc.stopWait(name)
}

// clearUnsure: the cached name is no longer unsure — its value left, or the
// upstream confirmed it.
func (tc *typeCache) clearUnsure(name string) {
	if tc.get(name).unsure() {
		tc.setUnsure(name, false)
		tc.heard(name)
	}
}

// clearUnreachable: the name's error is no longer the relay's own
// UNAVAILABLE — it left, or the upstream's word replaced it.
func (tc *typeCache) clearUnreachable(name string) {
	if tc.get(name).unreachable() {
		tc.heard(name)
	}
}

// heard: what the View holds of name is the upstream's word again
// (wordHeard).
func (tc *typeCache) heard(name string) {
	if e := tc.names[name]; e != nil {
		e.word = wordHeard
		tc.tidy(name)
	}
}

// stopWait stops the wait for name (armUnknown), if one runs.
func (tc *typeCache) stopWait(name string) {
	if e := tc.names[name]; e != nil && e.wait != nil {
		e.wait = nil // (its timer, shared, finds the name no longer waits)
		tc.tidy(name)
	}
}

// ofAuthority reports whether name belongs to authority ("" the default
// servers').
func ofAuthority(name, authority string) bool {
	a, _ := keying.Authority(name)
	return a == authority
}

// listingCovered reports whether the subscription that brings another
// authority's name n from authority's servers is still on: the default
// servers list such names only under the wildcard, and an answer in flight
// when the wildcard ended confirms nothing (the server forgets what it sent
// under it and would not say when n is gone).
func (tc *typeCache) listingCovered(n, authority string) bool {
	return !ofAuthority(n, authority) && (authority != "" || tc.up[keying.Wildcard])
}

// subscribedUpstream reports whether an upstream subscription covers the
// plain name n: its own, the wildcard's (the default authority's names), its
// glob collection's, or one of its keys with parameters (TP2: the server
// sends the variant the key selects). Keys whose subscription ended do not
// count: an answer to one in flight confirms nothing, as the server, which
// forgot it, would not tell the relay of a deletion.
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
	return tc.globCovered(n)
}

// answerGlob notes that e answers its glob collection's subscription: only
// that subscription brings a member not subscribed by name, so the
// upstream's set of the glob is what it sent (full state: every SotW
// response from now on carries it, Delta sends its changes). The glob is
// marked changed, so that its streams look at the set again.
func (a *applier) answerGlob(e *downstream.Resource) {
	tc := a.tc
	if e.Glob == "" || !tc.up[e.Glob] || tc.up[e.Name] || !ofAuthority(e.Name, a.authority) {
		return
	}
	if a.edit.answerGlob(e.Glob) {
		a.edit.change(e.Glob)
	}
}

// globCovered reports whether n's glob collection is subscribed upstream.
func (tc *typeCache) globCovered(n string) bool {
	g := keying.GlobOf(n)
	return g != "" && tc.up[g]
}

// keySubscribed reports whether one of n's keys with parameters is subscribed
// upstream.
func (tc *typeCache) keySubscribed(n string) bool {
	for k := range tc.get(n).params {
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
	if tc.plainCovered(n) || tc.listingCovered(n, authority) {
		return true
	}
	sel := res[n]
	for k := range tc.get(n).params {
		if ks, ok := res[k]; ok && tc.up[k] && ks.Root() == sel.Root() {
			return true
		}
	}
	return false
}

// armUnknown watches a name subscribed upstream that the cache knows nothing
// of. While its authority is unreachable, clients get a TP3 UNAVAILABLE error
// after UnavailableAfter (transient: they keep what they have). Once the
// upstream is connected and has answered the type, a name it still says
// nothing of after upstream.does_not_exist_after is not found yet
// (View.Unfound) — a SotW server tells nothing of a named resource that does
// not exist, and xDS clients conclude the same with their own does-not-exist
// timer — so that clients that hold none of it are answered. Silence is not
// the upstream's word: a client that holds it is not told it is gone, and
// an unsure cached copy stays cached (and served) until the upstream speaks.
func (s *state) armUnknown(tc *typeCache, name string) {
	if tc.get(name).wait != nil || tc.knows(name) {
		return
	}
	d := s.cfg.Upstream.DoesNotExistAfter
	if !tc.sc.connected[tc.speaker(name)] {
		d = s.cfg.Upstream.UnavailableAfter
	}
	w := tc.arming
	if w == nil || w.hold != s.holds || w.d != d {
		w = &unknownWait{hold: s.holds, d: d}
		w.timer = time.AfterFunc(d, func() { s.unknownFired(tc, w) })
		tc.arming = w
	}
	w.names = append(w.names, name)
	tc.entry(name).wait = w
}

// wildcardUnfound records in the edit whether the wildcard's set is not found
// yet (View.Unfound): the upstream's silence settled it (a Settle), until its
// word makes it complete or the wildcard is unsubscribed (subscribe.go). It
// reports whether that is new.
func (a *applier) wildcardUnfound(complete bool) bool {
	tc := a.tc
	if complete {
		a.edit.markUnfound(keying.Wildcard, false)
		return false
	}
	_, was := a.edit.unfound[keying.Wildcard]
	if was || !a.u.Unfound || a.authority != "" || !tc.up[keying.Wildcard] || (!a.sc.own && tc.withholdsWildcard()) {
		return false
	}
	a.edit.markUnfound(keying.Wildcard, true)
	return true
}

// answeredSince reports whether the upstream may have answered name since
// the relay asked for it (upstream.Client.AnsweredSince): its silence counts
// only then.
func (s *state) answeredSince(tc *typeCache, name string) bool {
	c := tc.sc.upstreams[tc.speaker(name)]
	return c == nil || c.AnsweredSince(tc.typeURL, name)
}

// askUpstream has the upstream client ask the server for its word on name
// on a new stream (upstream.Client.Resync), and reports whether it will.
func (s *state) askUpstream(tc *typeCache, name string) bool {
	c := tc.sc.upstreams[tc.speaker(name)]
	return c != nil && c.Resync(tc.typeURL, name)
}

// speaker returns the authority whose servers' subscription covers name: its
// own, unless only the default servers' wildcard covers it (another
// authority's name they list), whose servers alone can then say it is gone.
func (tc *typeCache) speaker(name string) string {
	auth, _ := keying.Authority(name)
	if auth == "" || tc.up[name] || tc.globCovered(name) || tc.keySubscribed(name) || !tc.up[keying.Wildcard] {
		return auth
	}
	if res, ok := tc.view.Resources[name]; ok && res.InWildcard() {
		return ""
	}
	return auth
}

// silent: the upstream said nothing of the names for does_not_exist_after,
// and asking again on a new stream can tell no more. Silence is not the
// upstream's word — a server slow behind a large response is silent too —
// so a name the cache lacks is not found yet (View.Unfound): that answers
// clients that hold none of it, never tells one that brought it from
// elsewhere that it is gone. A cached copy stays, except for a SotW
// server's type that is not full state (RDS, EDS), where silence is all the
// protocol offers (no response proves a name it lacks, on any stream): the
// relay's copy is taken as gone, as xDS clients do with their own timer, or
// a deletion the relay missed would be served for good. That takes back
// the relay's own word only: the name is unfound, and clients that hold
// that copy are told it is gone (View.Withdrawn), not those that hold
// another version brought from elsewhere.
func (s *state) silent(tc *typeCache, names []string) {
	e := editOf(tc.view)
	sured := false
	for _, name := range names {
		c := tc.sc.upstreams[tc.speaker(name)]
		_, cached := e.res[name] // (as earlier names of the batch left it)
		gone := cached && c != nil && !c.Delta() && !keying.FullState(tc.typeURL)
		if cached && !gone {
			if _, declared := tc.declaring[name]; declared {
				// Delta: told the version the relay holds, the server sent
				// nothing of it for the whole wait: it holds the same.
				delete(tc.declaring, name)
				tc.confirmed(name)
				sured = true
			}
			continue
		}
		e.change(name)
		version := ""
		if cached {
			version = e.res[name].Version
			// In TP2 variant mode, the variant the name selects is gone.
			if tc.variantMode(name) {
				tc.dropVariant(name, e.res[name].Constraints)
				s.resolveVariants(tc, name, e)
			} else {
				e.drop(name)
			}
			tc.clearUnsure(name)
			s.unref.forget(tc.lruKey(name))
		}
		if tc.up[name] {
			e.markUnfound(name, true)
			e.withdraw(name, version)
		}
		if tc.get(name).unreachable() {
			e.clearError(name) // the upstream is back: it is no longer unreachable
			tc.clearUnreachable(name)
		}
	}
	if len(e.changed) > 0 {
		v := e.view(s.nextSeq())
		s.publish(tc, v)
		s.notify(tc, v)
	}
	if sured {
		s.showUnsure(tc)
	}
}

// rearmUnknown restarts the watches of unknown names of authority in sc when
// its upstream connects: from now on the does-not-exist wait.
func (s *state) rearmUnknown(sc *scope, authority string) {
	for _, tc := range sc.types {
		for name, e := range tc.names {
			if e.wait == nil {
				continue
			}
			if a, _ := keying.Authority(name); a == authority {
				tc.stopWait(name)
				s.armUnknown(tc, name)
			}
		}
	}
}

// knows reports whether the cache knows something of name: its resource
// (unless unsure), that it does not exist or is not found yet, or an error
// other than its own UNAVAILABLE.
func (tc *typeCache) knows(name string) bool {
	_, cached := tc.view.Resources[name]
	_, absent := tc.view.Absent[name]
	_, unfound := tc.view.Unfound[name]
	_, failed := tc.view.Errors[name]
	known := tc.get(name)
	return (cached && !known.unsure()) || absent || unfound || (failed && !known.unreachable())
}

// covers reports whether an upstream subscription covers name: its own, or
// the wildcard's or its glob's for a cached member of their set.
func (tc *typeCache) covers(name string) bool {
	if tc.up[name] {
		return true
	}
	res, ok := tc.view.Resources[name]
	return ok && (tc.up[keying.Wildcard] && res.InWildcard() || tc.up[res.Glob] && res.Glob != "")
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

// declaredAnswered: the server answered a Delta stream's first request of
// the type, which declared the unsure names in tc.declaring: of those it did
// not remove or send, the relay's version is its own (Delta: it sends what
// differs from a declared version). A Settle is no answer: the server's
// silence. Applied before the View is published.
func (a *applier) declaredAnswered() {
	if !a.u.Delta || a.u.Event != upstream.Response {
		return
	}
	for n, auth := range a.tc.declaring {
		if auth != a.authority {
			continue
		}
		delete(a.tc.declaring, n)
		if a.tc.get(n).unsure() {
			a.tc.confirmed(n)
		}
	}
}
