package relay_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The wildcard released in one client request with names the client
// subscribed by name: once their shared linger ends, the relay tells the
// upstream it no longer wants them, and never subscribes the wildcard's
// members by name on the way out (Forget of the members while "*" is still
// subscribed upstream makes the upstream client confirm them: subscribe,
// then unsubscribe, each member).
func TestReleasedTogetherWildcardMembersNotSubscribed(t *testing.T) {
	up, _, all, from := wildcardDroppedWithNames(t, 100, 0)
	up.MustWait(t, "the wildcard and the names unsubscribed upstream", func(s xdstest.Stats) bool {
		gone := map[string]bool{}
		for _, req := range s.Requests[from:] {
			for _, n := range req.Delta.GetResourceNamesUnsubscribe() {
				gone[n] = true
			}
		}
		return len(gone) >= len(all)
	})
	// What the relay's upstream client sends next goes out at once; 300 ms
	// is ample for it on a loaded machine.
	time.Sleep(300 * time.Millisecond)
	for _, req := range up.Requests()[from:] {
		if sub := req.Delta.GetResourceNamesSubscribe(); len(sub) > 0 {
			t.Errorf("after the client dropped the wildcard and %d names, the relay subscribed %d names upstream (%s ...)",
				len(all)-1, len(sub), strings.Join(sub[:min(3, len(sub))], " "))
		}
	}
}

// A name released with others, subscribed again and released again before
// their shared linger ends, lingers anew (a second lingerEntry): the first
// linger, which skips it, must not leave it subscribed upstream for good.
// (Which linger's request leaves first, or whether the upstream client
// sends both in one request, is the timers' race: not asserted.)
func TestReleasedTogetherReleasedAgainLingersAnew(t *testing.T) {
	names := []string{"c0", "c1", "c2", "c3"}
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters(names...))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 2 * time.Second
	}))
	c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "again"})
	c.Subscribe(resource.ClusterType, names, nil)
	receiveAll(t, c, len(names))
	from := len(up.Requests())
	c.Subscribe(resource.ClusterType, nil, names)
	c.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	c.Subscribe(resource.ClusterType, nil, []string{"c1"})
	up.MustWait(t, "every name unsubscribed upstream", func(s xdstest.Stats) bool {
		gone := map[string]bool{}
		for _, req := range s.Requests[from:] {
			for _, n := range req.Delta.GetResourceNamesUnsubscribe() {
				gone[n] = true
			}
		}
		return len(gone) == len(names)
	})
}

// A glob collection released in one client request with one of its members
// subscribed by name (one linger, one Unsubscribe of both): when the
// upstream deletes that member meanwhile, a client that subscribes the glob
// and the member again is told it is gone, on SotW and Delta upstreams.
func TestReleasedTogetherGlobAndNamedMember(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) {
			m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
			g := xdstest.NewGlobADS(m1, m2)
			def := xdstest.StartUpstream(t)
			def.SetResources(clusters("c0"))
			auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
			r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.Linger = 50 * time.Millisecond
				c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
				c.Upstream.Authorities = map[string]config.Authority{"auth": {
					XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: protocol}}}}
			}))
			first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
			first.Subscribe(resource.ClusterType, globG, m1)
			ackUntil(t, first, []string{m1, m2}, "the first client never got the glob's members")
			first.Close() // (the glob and m1 released under one hold)
			globUnsubscribed(t, r)
			g.Set(m2)

			again := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "again"})
			again.Subscribe(resource.ClusterType, globG, m1)
			ackUntil(t, again, []string{m2}, "the new subscriber still holds "+m1+", which the upstream deleted")
		})
	}
}

// The wildcard released in one client request with names subscribed by
// name, a member deleted upstream meanwhile: a client that subscribes the
// wildcard again is told the member is gone (or never gets it), however the
// relay's way out confirmed or forgot the members upstream.
func TestReleasedTogetherWildcardMemberDeletedMeanwhile(t *testing.T) {
	up, r, _, from := wildcardDroppedWithNames(t, 20, 200*time.Millisecond)
	members, named := numbered("w", 20), numbered("x", 500)
	up.MustWait(t, "the wildcard unsubscribed upstream", func(s xdstest.Stats) bool {
		for _, req := range s.Requests[from:] {
			if slices.Contains(req.Delta.GetResourceNamesUnsubscribe(), "*") {
				return true
			}
		}
		return false
	})
	up.SetResources(clusters(slices.Concat(members[1:], named)...)) // w0 deleted

	again := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "again"})
	again.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for !(len(held) == len(members)-1+len(named) && !held["w0"]) {
		resp, ok := again.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the new wildcard client holds %d names, w0 among them: %v; want the %d left, without w0",
				len(held), held["w0"], len(members)-1+len(named))
		}
		again.Ack(resp)
		got, removed := deltaNames(resp)
		for _, n := range got {
			held[n] = true
		}
		for _, n := range removed {
			delete(held, n)
		}
	}
}

// wildcardDroppedWithNames starts a Delta upstream of nMembers wildcard
// members (w0…) and 500 other clusters (x0…), and a relay (Delta, 50 ms
// linger, does_not_exist_after dne unless 0) with a client that subscribes
// the wildcard and the 500 names, receives them all, then drops them all in
// one request. It returns what the client dropped and the index of the
// upstream's first request after the drop.
func wildcardDroppedWithNames(t *testing.T, nMembers int, dne time.Duration) (*xdstest.Upstream, *xdstest.Relay, []string, int) {
	members, named := numbered("w", nMembers), numbered("x", 500)
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters(slices.Concat(members, named)...))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 50 * time.Millisecond
		if dne != 0 {
			c.Upstream.DoesNotExistAfter = dne
		}
	}))
	c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	all := append([]string{"*"}, named...)
	c.Subscribe(resource.ClusterType, all, nil)
	receiveAll(t, c, len(members)+len(named))
	from := len(up.Requests())
	c.Subscribe(resource.ClusterType, nil, all)
	return up, r, all, from
}

// numbered returns prefix0 … prefix(n-1).
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
