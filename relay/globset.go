package relay

import (
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// globsLacking returns the cached members of the glob collections that a
// SotW full state answers whole (upstream.Update.Globs) and that it lacks:
// the upstream's word that they are gone, though the upstream client, which
// forgot them with an earlier subscription of the glob, does not list them
// as removed. Each of those globs counts as answered, empty or not.
func (a *applier) globsLacking() []string {
	var gone []string
	for _, g := range a.u.Globs {
		if !a.tc.up[g] {
			continue // no longer subscribed: its answer says nothing of the set
		}
		if a.edit.answerGlob(g) {
			a.edit.change(g)
		}
		for key, cur := range a.edit.old.Resources {
			if _, ok := a.seen[key]; !ok && key == cur.Name && cur.Glob == g {
				gone = append(gone, key)
			}
		}
	}
	return gone
}

// deltaGlobs applies a Delta response's word on glob collections: the first
// response to a request that subscribed a glob answers its set (what the
// request declared, changed by the response: upstream.Update.Globs), and a
// glob in removed_resources is empty (xDS TP1: a server names an empty
// glob collection so) — its cached members are gone.
func (a *applier) deltaGlobs() {
	for _, g := range a.u.Globs {
		if a.tc.up[g] && a.edit.answerGlob(g) {
			a.edit.change(g)
		}
	}
	for _, g := range a.u.Removed {
		if !keying.IsGlob(g) || !a.tc.up[g] || !ofAuthority(g, a.authority) {
			continue
		}
		if a.edit.answerGlob(g) {
			a.edit.change(g)
		}
		for key, cur := range a.edit.old.Resources {
			if _, ok := a.seen[key]; !ok && key == cur.Name && cur.Glob == g {
				a.deleted(key)
			}
		}
	}
}

// unsureGlobMembers: the glob collection's upstream subscription ended, and
// the members only it covered stay cached (unreferenced) but unsure, as the
// wildcard's do (unsureWildcardMembers): a Delta server forgets them with
// the glob and, when the glob is subscribed again on the same stream, sends
// what it has and says nothing of a member deleted meanwhile. They are
// forgotten upstream too (upstream.Client.Forget). Subscribed again, the glob
// arms the wait for each (ref): the server sends it, or a new stream, which
// declares it, has the server say it is gone. A member the default servers'
// subscribed wildcard lists is handed to them instead, sure: they speak of
// it from now on (applier.owned), and would never confirm it, thinking the
// relay holds it — as their listing kept aside, if any (settleAside).
func (s *state) unsureGlobMembers(tc *typeCache, glob string) {
	if !keying.IsGlob(glob) {
		return
	}
	c := tc.clientFor(glob)
	if c == nil {
		return
	}
	auth, _ := keying.Authority(glob)
	var forget []string
	var handed []*downstream.Resource
	for n, res := range tc.view.Resources {
		if n != res.Name || res.Constraints != "" || !inSet(res, glob) || tc.up[n] || !tc.speaksFor(res, auth) {
			continue // a TP2 selection, another glob's, subscribed by name, or the default servers' listing
		}
		forget = append(forget, n)
		if tc.get(n).aside != nil {
			continue // its listing kept aside replaces it (settleAside)
		}
		if res.Listed && tc.up[keying.Wildcard] {
			handed = append(handed, res)
			continue
		}
		tc.markUnsure(n)
	}
	if len(forget) > 0 {
		c.Forget(tc.typeURL, forget...)
	}
	s.handToDefaultServers(tc, handed)
}

// leftToDefaultServers reports whether the default servers alone speak for
// the cached res, another authority's name n, now that no subscription of
// its authority covers it: their subscribed wildcard lists it, or their
// copy is the one cached. They would never confirm it, thinking the relay
// holds it, so it is not unsure; a listing kept aside, if any, replaces it
// (settleAside).
func (tc *typeCache) leftToDefaultServers(n string, res *downstream.Resource) bool {
	return !ofAuthority(n, "") && tc.up[keying.Wildcard] && !tc.subscribedUpstream(n) &&
		(res.Listed || res.Authority == "")
}

// handToDefaultServers makes the cached listed members theirs: their
// authority's unconfirmed streams no longer make them stale (View.Stale).
// Streams that held back for them look again (tellSured).
func (s *state) handToDefaultServers(tc *typeCache, listed []*downstream.Resource) {
	if len(listed) == 0 {
		return
	}
	e := editOf(tc.view)
	for _, res := range listed {
		e.put(res.Name, res.FromDefaultServers())
		tc.sured = append(tc.sured, res.Name)
	}
	s.publish(tc, e.view(s.nextSeq()))
}

// inSet reports whether the cached res is a member of the set of the
// wildcard or of a glob collection.
func inSet(res *downstream.Resource, set string) bool {
	if set == keying.Wildcard {
		return res.InWildcard()
	}
	return res.Glob == set
}
