package relay

import (
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// The default servers may list another authority's name in their wildcard
// answer. While a subscription of that authority covers the name, they only
// list it (applier.owned); while the authority's stream is also away, their
// listing may be newer than its copy (the authority changed it meanwhile)
// or older (it was on its way when the authority's stream ended: the two
// streams are not ordered). So it is kept aside (entry.aside), and
// settleAside alone decides what becomes of it.

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
// becomes of each listing kept aside. It goes once it no longer stands for
// what the default servers hold beside the authority's unconfirmed copy:
// that copy left the cache or is no longer listed, their wildcard ended, or
// the authority's stream answered (its copy is its word). Once no
// subscription of the authority covers the name, the authority no longer
// speaks of it: the listing — what the default servers think the relay
// holds, and may never send again — replaces its copy.
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
		inDoubt := ok && cur.Listed && cur.Authority != "" && tc.unconfirmed[cur.Authority] && tc.up[keying.Wildcard] &&
			!tc.variantMode(n)
		if inDoubt && tc.subscribedUpstream(n) {
			continue
		}
		tc.setAside(n, nil)
		if inDoubt {
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
