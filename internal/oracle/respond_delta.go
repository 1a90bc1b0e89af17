package oracle

import (
	"maps"
	"slices"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// onDelta applies one Delta response as a client does, after checking it
// against the upstream's history.
func (c *Client) onDelta(s *cstream, resp *discoverypb.DeltaDiscoveryResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.gen != c.gen || c.closed {
		return
	}
	t := resp.GetTypeUrl()
	ct := c.types[t]
	if ct == nil {
		c.fail("a response of type %s it never asked for", t)
		return
	}
	ct.nonce = resp.GetNonce()
	items, bad := deltaItems(resp)
	removed := deltaRemovals(resp)
	c.note("<- %s n=%s +%v -%v", keying.ShortType(t), resp.GetNonce(), itemNames(items), removed)
	// A picky client rejects the bad resources and applies the rest, as
	// Envoy and gRPC (A46) do: a Delta NACK does not say which resources it
	// rejected, so a server that rejected-all clients wait on would have to
	// resend what they NACKed to converge.
	nack := c.spec.Picky && bad
	rejected := c.rejectedKeys(t, items, nack)
	next := maps.Clone(ct.held)
	lost, ok := c.applyRemovals(t, ct, removed, rejected, next)
	if !ok {
		return
	}
	if lost, ok = c.applyDeltaItems(t, ct, items, rejected, next, lost); !ok {
		return
	}
	for _, k := range lost {
		if !c.justified(t, ct.held[k]) {
			return
		}
	}
	for _, k := range lost {
		delete(ct.kept, k)
	}
	ct.held, ct.asked = next, false
	if !c.checkRefs(t, lost) {
		return
	}
	c.followLocked()
	if nack {
		c.requestLocked(t, nil, nil, "bad version")
		return
	}
	c.requestLocked(t, nil, nil) // ACK
}

// deltaItems returns the resources of a Delta response but heartbeats, and
// whether one of them is bad.
func deltaItems(resp *discoverypb.DeltaDiscoveryResponse) ([]item, bool) {
	var items []item
	bad := false
	for _, w := range resp.GetResources() {
		it := fromWrapper(w)
		if it.beat {
			continue
		}
		items = append(items, it)
		bad = bad || it.bad
	}
	return items, bad
}

// deltaRemoval is a name a Delta response removes, with the env of the
// variant it removes ("*": any).
type deltaRemoval struct{ name, env string }

// deltaRemovals returns what a Delta response removes. They apply first: a
// TP2 response may replace a variant by another of the same name, removing
// the old one (removed_resource_names names it with its constraints).
func deltaRemovals(resp *discoverypb.DeltaDiscoveryResponse) []deltaRemoval {
	var removed []deltaRemoval
	for _, n := range resp.GetRemovedResources() {
		removed = append(removed, deltaRemoval{n, "*"})
	}
	for _, rn := range resp.GetRemovedResourceNames() {
		removed = append(removed, deltaRemoval{rn.GetName(), rn.GetDynamicParameterConstraints().GetConstraint().GetValue()})
	}
	return removed
}

// rejectedKeys returns the keys of the bad items a NACKing client rejects.
func (c *Client) rejectedKeys(t string, items []item, nack bool) map[string]bool {
	rejected := map[string]bool{}
	if nack {
		for _, it := range items {
			if it.bad {
				rejected[c.key(t, it.name)] = true
			}
		}
	}
	return rejected
}

// applyRemovals removes from next what the response removes of what the
// client holds, and returns the keys it lost; false when a removal of what
// it does not hold is unjustified. Called with mu held.
func (c *Client) applyRemovals(t string, ct *ctype, removed []deltaRemoval, rejected map[string]bool,
	next map[string]*held) ([]string, bool) {
	var lost []string
	for _, rm := range removed {
		k := c.key(t, rm.name)
		if rejected[k] {
			continue // a variant replaced by one the client rejects: it keeps it
		}
		h := ct.held[k]
		if h == nil {
			// "It does not exist": only for what the upstream has not got —
			// or "not found yet", for what the client does not hold, where
			// the upstream may be silent past the relay's does-not-exist
			// time or had not yet told the relay of it.
			if ct.names[rm.name] && !c.run.sched.Opts.Dims.quiet() && !c.notFoundYet(t, rm.name) &&
				!c.justified(t, &held{name: rm.name, env: c.env(t)}) {
				return nil, false
			}
			continue
		}
		if rm.env != "*" && rm.env != h.env {
			continue // another variant than the one held
		}
		delete(next, k)
		lost = append(lost, k)
	}
	return lost, true
}

// applyDeltaItems puts into next the items the client accepts and watches
// (a replaced variant is no longer lost) and keeps what it rejects, and
// returns lost; false when an item fails a check. Called with mu held.
func (c *Client) applyDeltaItems(t string, ct *ctype, items []item, rejected map[string]bool,
	next map[string]*held, lost []string) ([]string, bool) {
	for _, it := range items {
		h, ok := c.accept(t, it)
		if !ok {
			return nil, false
		}
		k := c.key(t, it.name)
		if cur := ct.held[k]; cur != nil && cur.version == it.version && !ct.asked && !ct.kept[k] {
			if !ct.resub[k] {
				c.fail("%s %s resent at version %s the client holds, unasked", t, k, it.version)
				return nil, false
			}
			delete(ct.resub, k) // the answer to the subscription, after a response in flight
		}
		if rejected[k] {
			if ct.kept == nil {
				ct.kept = map[string]bool{}
			}
			ct.kept[k] = true
			continue
		}
		delete(ct.kept, k)
		h.version = it.version
		if c.subscribes(t, it.name) {
			next[k] = h                                                           // (clients ignore what they no longer watch)
			lost = slices.DeleteFunc(lost, func(l string) bool { return l == k }) // replaced
		}
	}
	return lost, true
}
