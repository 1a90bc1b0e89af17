package relay_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// upstreamModes runs f against a relay speaking SotW and then Delta to its
// go-control-plane upstream.
func upstreamModes(t *testing.T, f func(t *testing.T, mode xdstest.RelayOption, delta bool)) {
	for _, p := range []string{"sotw", "delta"} {
		t.Run("upstream-"+p, func(t *testing.T) {
			f(t, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = p }), p == "delta")
		})
	}
}

func deltaNames(resp *discoverygrpc.DeltaDiscoveryResponse) (got []string, removed []string) {
	for _, r := range resp.GetResources() {
		got = append(got, r.GetName())
	}
	slices.Sort(got)
	removed = slices.Clone(resp.GetRemovedResources())
	slices.Sort(removed)
	return got, removed
}

func wantDelta(t *testing.T, resp *discoverygrpc.DeltaDiscoveryResponse, want, wantRemoved []string) {
	t.Helper()
	got, removed := deltaNames(resp)
	slices.Sort(want)
	slices.Sort(wantRemoved)
	if !slices.Equal(got, want) || !slices.Equal(removed, wantRemoved) {
		t.Fatalf("%s delta response: resources %v removed %v, want %v removed %v", resp.GetTypeUrl(), got, removed, want, wantRemoved)
	}
	for _, r := range resp.GetResources() {
		if r.GetVersion() == "" || r.GetResource() == nil {
			t.Fatalf("resource %s without version or body", r.GetName())
		}
	}
}

// A wildcard Delta client receives added and removed clusters, one resource
// per change.
func TestDeltaWildcardAddRemove(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.ClusterType, []string{"*"}, nil)
		resp := c.MustRecv()
		wantDelta(t, resp, []string{"c1", "c2"}, nil)
		c.Ack(resp)

		up.SetResources(clusters("c1", "c2", "c3"))
		resp = c.MustRecv()
		wantDelta(t, resp, []string{"c3"}, nil)
		c.Ack(resp)

		up.SetResources(clusters("c2", "c3"))
		resp = c.MustRecv()
		wantDelta(t, resp, nil, []string{"c1"})
		c.Ack(resp)
		c.ExpectNoResponse(quiet)

		// Legacy wildcard: a first request naming nothing.
		legacy := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "legacy"})
		legacy.Subscribe(resource.ClusterType, nil, nil)
		wantDelta(t, legacy.MustRecv(), []string{"c2", "c3"}, nil)
	})
}

// Subscribing and unsubscribing by name; a deleted resource is a removal.
func TestDeltaNamedSubscriptions(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		be := xdstest.StartBackend(t, "a")
		res := xdstest.MergeResources(xdstest.GRPCResources("a", be.Addr()), xdstest.GRPCResources("b", be.Addr()))
		up.SetResources(res)
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.EndpointType, []string{"endpoints-a"}, nil)
		resp := c.MustRecv()
		wantDelta(t, resp, []string{"endpoints-a"}, nil)
		c.Ack(resp)

		c.Subscribe(resource.EndpointType, []string{"endpoints-b"}, nil)
		resp = c.MustRecv()
		wantDelta(t, resp, []string{"endpoints-b"}, nil)
		c.Ack(resp)

		c.Subscribe(resource.EndpointType, nil, []string{"endpoints-a"})
		c.ExpectNoResponse(quiet)

		if !delta {
			return // a SotW upstream cannot say that an EDS resource is gone
		}
		// Deleting endpoints-b upstream is a removal for its subscriber.
		up.SetResources(xdstest.GRPCResources("a", be.Addr()))
		resp = c.MustRecv()
		wantDelta(t, resp, nil, []string{"endpoints-b"})
		c.Ack(resp)
	})
}

// A NACK is not answered by a resend of the same versions.
func TestDeltaNACKNoResend(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.ClusterType, []string{"c1"}, nil)
		c.Nack(c.MustRecv(), "bad cluster")
		c.ExpectNoResponse(quiet)

		up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "eds-other")}})
		wantDelta(t, c.MustRecv(), []string{"c1"}, nil)
	})
}

// Subscription changes count even on a request with a stale nonce.
func TestDeltaStaleNonceSubscription(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.ClusterType, []string{"c1"}, nil)
		first := c.MustRecv()
		c.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: "stale-" + first.GetNonce(),
			ResourceNamesSubscribe: []string{"c2"}})
		wantDelta(t, c.MustRecv(), []string{"c2"}, nil)
	})
}

// initial_resource_versions on a new stream: what the client holds at the
// same version is not resent; changed resources are; held resources that no
// longer exist are removed.
func TestDeltaInitialResourceVersions(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.ClusterType, []string{"*"}, nil)
		resp := c.MustRecv()
		versions := map[string]string{}
		for _, res := range resp.GetResources() {
			versions[res.GetName()] = res.GetVersion()
		}
		c.Close()

		// c1 changes, c2 does not, c0 is gone.
		up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "eds-new"), xdstest.EDSCluster("c2", "eds-c2")}})
		versions["c0"] = "old"
		again := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		again.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: versions})
		// The relay may learn of c1's change after answering, and holds the
		// removal of what the client brought a moment, in case it still
		// refers to it (it may not have asked for its listeners yet): collect
		// until c1's new version arrived and c0 was removed. c2 must never be
		// resent.
		sent, removed := map[string]string{}, map[string]bool{}
		for sent["c1"] == "" || sent["c1"] == versions["c1"] || !removed["c0"] {
			resp = again.MustRecv()
			for _, res := range resp.GetResources() {
				sent[res.GetName()] = res.GetVersion()
			}
			for _, n := range resp.GetRemovedResources() {
				removed[n] = true
			}
			again.Ack(resp)
		}
		if _, resent := sent["c2"]; resent || !removed["c0"] {
			t.Fatalf("after reconnect: sent %v removed %v; want c1 only, c0 removed", sent, removed)
		}
	})
}

// Unsubscribing a name that the wildcard also covers is answered with the
// resource (xDS).
func TestDeltaUnsubscribeCoveredByWildcard(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
		c.Subscribe(resource.ClusterType, []string{"*", "c1"}, nil)
		// c1 may come first (the named part) and c2 with the wildcard's answer.
		held := map[string]bool{}
		for !held["c1"] || !held["c2"] {
			resp := c.MustRecv()
			for _, r := range resp.GetResources() {
				held[r.GetName()] = true
			}
			c.Ack(resp)
		}
		c.Subscribe(resource.ClusterType, nil, []string{"c1"})
		wantDelta(t, c.MustRecv(), []string{"c1"}, nil)
	})
}

// SotW and Delta clients of the same resources get the same bytes and
// versions, and the upstream sees one stream.
func TestMixedFleetSameContent(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c1", "c2"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		s := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
		s.Subscribe(resource.ClusterType, "*")
		d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
		d.Subscribe(resource.ClusterType, []string{"*"}, nil)
		sresp := s.RecvType(resource.ClusterType)
		dresp := d.MustRecv()
		byName := map[string][]byte{}
		for _, res := range dresp.GetResources() {
			byName[res.GetName()] = res.GetResource().GetValue()
		}
		got := names(t, sresp)
		for i, a := range sresp.GetResources() {
			if !slices.Equal(a.GetValue(), byName[got[i]]) {
				t.Fatalf("resource %s differs between SotW and Delta", got[i])
			}
		}
		if len(byName) != len(got) {
			t.Fatalf("SotW has %d resources, Delta %d", len(got), len(byName))
		}
		if n := up.Stats().TotalStreams; n != 1 {
			t.Fatalf("upstream saw %d streams", n)
		}
	})
}

// A name the upstream deleted is remembered as absent while it stays
// subscribed: a Delta client subscribing to it later is told at once that it
// does not exist, instead of waiting out its does-not-exist timer.
func TestDeletedNameAnsweredAtOnce(t *testing.T) {
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, _ bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("a", "b"))
		r := xdstest.StartRelay(t, up.Addr(), mode)

		c1 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c1"})
		c1.Subscribe(resource.ClusterType, "a")
		c1.Ack(c1.RecvType(resource.ClusterType))
		up.SetResources(clusters("b"))
		wantNames(t, c1.RecvType(resource.ClusterType)) // a is gone

		c2 := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "c2"})
		c2.Subscribe(resource.ClusterType, []string{"a"}, nil)
		resp, ok := c2.TryRecv(2 * time.Second)
		if !ok {
			t.Fatal("a Delta subscriber to a deleted name was not told it does not exist")
		}
		wantDelta(t, resp, nil, []string{"a"})
	})
}

// A Delta client that holds more resources than one request may name
// (limits.max_names_per_request) reconnects with all of them in
// initial_resource_versions: what a client holds is no subscription, so the
// stream is served — only what changed is sent (issue 23, item 9).
func TestDeltaReconnectDeclaresAllItHolds(t *testing.T) {
	const n = 10_001
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%05d", i)
	}
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters(names...))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Limits.MaxNamesPerRequest = 100 }))

	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
	first.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := make(map[string]string, n)
	for len(held) < n {
		// 10,001 clusters in pages take a while under -race on a busy machine.
		resp, ok := first.TryRecv(30 * time.Second)
		if !ok {
			t.Fatalf("the wildcard's %d clusters: %d received, then nothing for 30 s", n, len(held))
		}
		for _, res := range resp.GetResources() {
			held[res.GetName()] = res.GetVersion()
		}
		first.Ack(resp)
	}
	first.Close()

	again := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "d"})
	again.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: held})
	resp := again.MustRecv() // the wildcard's answer: the client holds it all
	wantDelta(t, resp, nil, nil)
	again.Ack(resp)
	up.SetResources(withCluster(clusters(names...), xdstest.EDSCluster("new", "eds-new")))
	wantDelta(t, again.MustRecv(), []string{"new"}, nil)
}
