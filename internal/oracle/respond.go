package oracle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/keying"
)

func bodyHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// badMarker marks a cluster version picky clients NACK (its alt_stat_name).
const badMarker = "bad-version"

func isBad(body []byte) bool { return bytes.Contains(body, []byte(badMarker)) }

// onSotW applies one SotW response as a client does, after checking it
// against the upstream's history.
func (c *Client) onSotW(s *cstream, resp *discoverypb.DiscoveryResponse) {
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
	full := keying.FullState(t)
	next := map[string]*held{}
	if !full {
		maps.Copy(next, ct.held)
	}
	var items []item
	bad := false
	once := map[[2]string]bool{}
	for _, a := range resp.GetResources() {
		it, err := decodeAny(t, a.GetValue(), a.GetTypeUrl())
		if err != nil {
			c.fail("undecodable %s resource: %v", t, err)
			return
		}
		if once[[2]string{it.name, it.env}] {
			c.fail("%s twice in one %s response", it.name, t) // xDS: never the same name twice
			return
		}
		once[[2]string{it.name, it.env}] = true
		if it.beat {
			continue
		}
		items = append(items, it)
		bad = bad || it.bad
	}
	for _, it := range items {
		h, ok := c.accept(t, it)
		if !ok {
			return
		}
		if c.subscribes(t, it.name) {
			next[c.key(t, it.name)] = h // (clients ignore what they no longer watch)
		}
	}
	c.note("<- %s v=%s n=%s %v errors=%d", keying.ShortType(t), resp.GetVersionInfo(), resp.GetNonce(), itemNames(items),
		len(resp.GetResourceErrors()))
	if resp.GetVersionInfo() == ct.acked && !ct.asked && !ct.nacked && sameHeld(next, ct.held) {
		c.fail("%s version %s resent though the client ACKed it and asked for nothing new", t, ct.acked)
		return
	}
	if c.spec.Picky && bad {
		ct.asked, ct.nacked = false, true
		c.requestLocked(t, nil, nil, "bad version")
		return // NACK: the client keeps what it had
	}
	var lost []string
	if full {
		transient := transientErrors(resp.GetResourceErrors())
		for k, h := range ct.held {
			if name, _ := keying.SplitSubscriptionKey(k); transient[name] {
				next[k] = h // TP3: a transient error keeps the client's copy
				continue
			}
			if _, still := next[k]; !still && c.subscribes(t, k) {
				if !c.justified(t, h) {
					return
				}
				lost = append(lost, k)
			}
		}
	}
	ct.held, ct.acked, ct.asked, ct.nacked = next, resp.GetVersionInfo(), false, false
	if !c.checkRefs(t, lost) {
		return
	}
	c.followLocked()
	c.requestLocked(t, nil, nil) // ACK
}

// env is the TP2 parameter the client selects variants of typeURL with.
func (c *Client) env(typeURL string) string {
	if c.tp2(typeURL) {
		return c.spec.Env
	}
	return ""
}

// accept checks one received resource: no invented state — the upstream
// published that content for a variant the client's parameters select — and
// no rollback, and returns it as held. Called with mu held.
func (c *Client) accept(t string, it item) (*held, bool) {
	if it.env != "" && it.env != c.env(t) {
		c.fail("got the %s variant env=%s of %s, its parameters are env=%q", t, it.env, it.name, c.env(t))
		return nil, false
	}
	if !c.run.world.Published(t, it.name, it.env, it.hash) {
		c.fail("got %s %s (env %q) with content %s the upstream never published", t, it.name, it.env, it.hash)
		return nil, false
	}
	if !c.noRollback(t, c.types[t].held[c.key(t, it.name)], it) {
		return nil, false
	}
	return &held{name: it.name, env: it.env, hash: it.hash, version: it.version, refs: c.run.world.refsOf(t, it.name, it.env, it.hash),
		gen: c.gen}, true
}

// notFoundYet reports whether the relay may not yet have heard of name
// of t from its upstreams: it had acknowledged no response carrying it a
// second before now (Upstream.ToldAt), or no client of it watched the name
// for a while since it last did (watchBook: it may have evicted it). A loaded
// machine may delay the upstream's first answer past the relay's
// does-not-exist time (seeds 190025, 181215, 140161); the second covers an
// answer sent while the relay's timer was firing.
func (c *Client) notFoundYet(t, name string) bool {
	inst := c.run.instance(c.target)
	for _, u := range c.run.ups {
		tt, ok := u.toldTimesOf(inst, t, name)
		if ok && time.Since(tt.first) > time.Second && !c.run.watches.unwatchedAfter(inst, t, name, tt.last) {
			return false
		}
	}
	return true
}

// justified reports (and otherwise fails the run) whether the client may be
// told that h is gone: the upstream removed it after publishing the content
// the client holds, or the relay it talks to may have nothing newer from
// the upstream than a state without it (a replica behind its sibling: see
// window). Called with mu held.
func (c *Client) justified(t string, h *held) bool {
	env := c.env(t)
	if c.run.world.GoneSince(t, h.name, env, h.hash, 0) {
		return true
	}
	absent := func(i int) bool { return c.run.world.AbsentAt(t, h.name, env, i) }
	if within(c.run.windows(c.run.instance(c.target), t), c.types[t].since, h.name, absent) {
		return true
	}
	c.fail("told %s %s (content %s) is gone, but the upstream has it (phantom loss)", t, h.name, h.hash)
	return false
}

// subscribes reports whether the client subscribes to key of t.
func (c *Client) subscribes(t, key string) bool {
	ct := c.types[t]
	name, _ := keying.SplitSubscriptionKey(key)
	if foreign(name) && ct.globsCover(name) {
		return true
	}
	return ct.wildcard && c.wildcardLists(name) || ct.names[name]
}

// wildcardLists reports whether the default servers' wildcard answer lists
// name: another authority's names only in a world where it does.
func (c *Client) wildcardLists(name string) bool {
	return !foreign(name) || c.run.sched.Opts.Dims.Foreign
}

// checkRefs checks make before break on ADS after lost (keys of t) went:
// nothing the client holds refers to them, unless the upstream itself
// published the referrer without them. Called with mu held.
func (c *Client) checkRefs(t string, lost []string) bool {
	if c.spec.PerType || len(lost) == 0 {
		return true
	}
	for _, rt := range worldTypes {
		for _, h := range c.types[rt].held {
			for _, n := range h.refs[t] {
				if slices.Contains(lost, c.key(t, n)) && !c.run.world.Breaks(rt, h.name, h.env, h.hash, t, n, c.env(t)) {
					c.fail("make before break broken: %s %s still refers to %s %s, which the client was told is gone",
						rt, h.name, t, n)
					return false
				}
			}
		}
	}
	return true
}

// followLocked updates the subscriptions that follow references (RDS and
// EDS for Envoy; RDS, CDS and EDS for gRPC) from what the client holds, and
// drops what it no longer subscribes to, as clients do. Called with mu held.
func (c *Client) followLocked() {
	follow := []string{keying.RouteType, keying.EndpointType}
	if c.spec.Shape == GRPC {
		follow = []string{keying.RouteType, keying.ClusterType, keying.EndpointType}
	}
	from := map[string]string{keying.RouteType: keying.ListenerType, keying.ClusterType: keying.RouteType, keying.EndpointType: keying.ClusterType}
	for _, t := range follow {
		want := map[string]bool{}
		for _, h := range c.types[from[t]].held {
			for _, n := range h.refs[t] {
				want[n] = true
			}
		}
		ct := c.types[t]
		var sub, unsub []string
		for n := range want {
			if !ct.names[n] {
				sub = append(sub, n)
			}
		}
		for n := range ct.names {
			if !want[n] {
				unsub = append(unsub, n)
				k := c.key(t, n)
				delete(ct.held, k)
				if ct.resub == nil {
					ct.resub = map[string]bool{}
				}
				ct.resub[k] = true // if it is subscribed again
			}
		}
		if len(sub) == 0 && len(unsub) == 0 {
			continue
		}
		ct.names = want
		ct.asked = true
		slices.Sort(sub)
		slices.Sort(unsub)
		c.requestLocked(t, sub, unsub)
	}
}

func sameHeld(a, b map[string]*held) bool {
	if len(a) != len(b) {
		return false
	}
	for k, h := range a {
		if o := b[k]; o == nil || o.hash != h.hash || o.env != h.env {
			return false
		}
	}
	return true
}

// converged reports whether the client holds exactly what it should of the
// snapshot, and if not, what differs.
func (c *Client) converged(s *Snapshot) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := c.expected(s)
	for _, t := range worldTypes {
		got := map[string]string{}
		var referred map[string]bool
		for k, h := range c.types[t].held {
			if _, ok := want[t][k]; !ok {
				if referred == nil {
					referred = c.referredLocked(t)
				}
				if referred[h.name] {
					continue // a removal held back: the upstream left a reference to it
				}
			}
			got[k] = h.hash
		}
		if !maps.Equal(got, want[t]) {
			if len(got)+len(want[t]) > 40 {
				return false, c.spec.ID + " " + t + ": " + fmtDiff(got, want[t])
			}
			return false, c.spec.ID + " " + t + ": holds " + fmtMap(got) + ", want " + fmtMap(want[t])
		}
	}
	return true, ""
}

// referredLocked returns the names of t that something the client holds
// refers to: the relay holds their removal back (make before break) while
// the upstream itself keeps the reference (Dims.Replace). One pass over what
// the client holds: converged runs under the lock the client's receive loop
// needs, and holds 10,000 names in large worlds. Called with mu held.
func (c *Client) referredLocked(t string) map[string]bool {
	out := map[string]bool{}
	for _, rt := range worldTypes {
		for _, h := range c.types[rt].held {
			for _, n := range h.refs[t] {
				out[n] = true
			}
		}
	}
	return out
}

// expected is what the client should hold of s, by type and key: content.
func (c *Client) expected(s *Snapshot) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range worldTypes {
		out[t] = map[string]string{}
	}
	pick := func(t, name string) *Res {
		r := s.Select(t, name, c.env(t))
		if r != nil {
			out[t][c.key(t, name)] = r.Hash
		}
		return r
	}
	var listeners []string
	for _, n := range s.Names(keying.ClusterType) {
		if c.types[keying.ClusterType].globsCover(n) {
			pick(keying.ClusterType, n)
		}
	}
	if c.spec.Shape == Envoy {
		listeners = s.Names(keying.ListenerType)
		for _, n := range s.Names(keying.ClusterType) {
			if !c.wildcardLists(n) {
				continue
			}
			if r := pick(keying.ClusterType, n); r != nil {
				for _, e := range r.Refs[keying.EndpointType] {
					pick(keying.EndpointType, e)
				}
			}
		}
	} else {
		listeners = slices.Collect(maps.Keys(c.types[keying.ListenerType].names))
	}
	for _, l := range listeners {
		lr := pick(keying.ListenerType, l)
		if lr == nil {
			continue
		}
		for _, rn := range lr.Refs[keying.RouteType] {
			rr := pick(keying.RouteType, rn)
			if rr == nil || c.spec.Shape == Envoy {
				continue
			}
			for _, cn := range rr.Refs[keying.ClusterType] {
				if cr := pick(keying.ClusterType, cn); cr != nil {
					for _, e := range cr.Refs[keying.EndpointType] {
						pick(keying.EndpointType, e)
					}
				}
			}
		}
	}
	return out
}

func fmtMap(m map[string]string) string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(keying.DisplayKey(k) + ":" + m[k])
	}
	b.WriteByte('}')
	return b.String()
}

func itemNames(items []item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.name + "@" + it.hash[:4]
		if it.env != "" {
			out[i] += "{" + it.env + "}"
		}
	}
	slices.Sort(out)
	return out
}

// fmtDiff describes how got differs from want, for large sets: the first
// keys held that should not be, lacking, or at another content.
func fmtDiff(got, want map[string]string) string {
	var extra, lack, other []string
	for k, h := range got {
		switch w, ok := want[k]; {
		case !ok:
			extra = append(extra, k)
		case w != h:
			other = append(other, k)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			lack = append(lack, k)
		}
	}
	first := func(l []string) string {
		slices.Sort(l)
		if len(l) > 8 {
			return fmt.Sprintf("%v and %d more", l[:8], len(l)-8)
		}
		return fmt.Sprint(l)
	}
	return fmt.Sprintf("holds %d, want %d: extra %s, lacks %s, other content %s", len(got), len(want), first(extra), first(lack), first(other))
}

// transientErrors returns the names a response's TP3 errors say are
// unavailable for now (UNAVAILABLE, INTERNAL, UNKNOWN): clients keep what
// they hold of them.
func transientErrors(errs []*discoverypb.ResourceError) map[string]bool {
	out := map[string]bool{}
	for _, e := range errs {
		switch codes.Code(e.GetErrorDetail().GetCode()) {
		case codes.Unavailable, codes.Internal, codes.Unknown:
			out[e.GetResourceName().GetName()] = true
		}
	}
	return out
}
