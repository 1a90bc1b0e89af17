package relay

import (
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// The default servers may list another authority's name in their wildcard
// answer. While a subscription of that authority covers the name, they only
// list it (applier.owned). Their listing and the authority's word travel on
// two streams that are not ordered, so while the authority's word is in
// doubt their listing may be newer than the cached copy or older: it is kept
// aside (entry.aside), and settleAside alone decides what becomes of it. In
// doubt: the authority's stream is away (its copy is unconfirmed), or the
// cached copy is the default servers' while a subscription of the authority
// covers the name: the authority's copy, on its way, may be older than their
// later listings — whether it answers the glob or brings a new member of a
// glob it answered long ago.

// setAside keeps res aside as the default servers' listing of name, or
// clears it for nil.
func (tc *typeCache) setAside(name string, res *downstream.Resource) {
	if res != nil {
		e := tc.entry(name)
		if e.aside == nil {
			tc.asides++
		}
		e.aside = res
		return
	}
	if e := tc.names[name]; e != nil && e.aside != nil {
		e.aside = nil
		tc.asides--
		tc.tidy(name)
	}
}

// settleAside decides, after anything that may have changed it, what
// becomes of each listing kept aside: it stays while the authority's word
// is in doubt and a subscription of the authority covers the name. It goes
// once the authority's word holds (its stream answered, or the name left
// the cache or is no longer listed) or the default servers' wildcard ended;
// it replaces the cached copy once nothing of the authority covers the
// name, or its glob's answer did not claim it: the default servers think the
// relay holds their listing, and may never send it again.
func (s *state) settleAside(tc *typeCache) {
	if tc.asides == 0 {
		return
	}
	e := editOf(tc.view)
	for n, en := range tc.names {
		aside := en.aside
		if aside == nil {
			continue
		}
		cur, ok := tc.view.Resources[n]
		theirs := ok && tc.up[keying.Wildcard] && !tc.variantMode(n) &&
			(cur.Authority == "" || cur.Listed && tc.unconfirmed[cur.Authority])
		if theirs && tc.awaitsAuthority(n, cur) {
			continue
		}
		if tc.up[keying.Wildcard] && tc.subscribedUpstream(n) && (!ok || cur.Version != aside.Version) {
			// Its authority's word (gone, or its copy) holds over their
			// listing, which they think the relay holds: it is asked
			// again once the glob ends.
			en.listedAbsent = true
		}
		tc.setAside(n, nil)
		if theirs {
			e.put(n, aside)
			e.change(n)
			tc.confirmed(n) // the default servers' word
			s.armTTL(tc, n, aside.TTL)
		}
	}
	if len(e.changed) > 0 {
		v := e.view(s.nextSeq())
		s.publish(tc, v)
		s.notify(tc, v)
		s.tellSured(tc, v)
	}
}

// awaitsAuthority reports whether the cached copy cur of another
// authority's name waits for that authority's word: a subscription of it
// covers the name, and its stream is away or cur is the default servers'
// (the authority, which speaks for the name, has not sent it yet).
func (tc *typeCache) awaitsAuthority(n string, cur *downstream.Resource) bool {
	if ofAuthority(n, "") || !tc.subscribedUpstream(n) {
		return false
	}
	return cur.Authority == "" || tc.unconfirmed[cur.Authority]
}
