package relay_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/relay"
)

// What makes a cached name sure again (see typeCache.unsure): an upstream
// answer counts only if a subscription that the server answers covers the
// name now — never an answer in flight for one that ended, nor one to a key
// with parameters that selects another variant (each test failing before
// its fix).

// An answer in flight for a TP2 subscription that ended: the default
// variant changes just as the relay's last subscription that is sent it
// ends, and the server's answer arrives after the relay unsubscribed. It is
// applied, but confirms nothing: the server, which has forgotten the ended
// subscription, would not tell the relay of a deletion, and a client that
// names c later must be told it is gone after does_not_exist_after.

// The key c{env=test}, which selects the default variant, ends. The relay
// took the answer for confirmed, as the name still had parameter keys
// (unreferenced ones), and a client that named c kept it for good (found by
// the oracle, seed 3006725: a wildcard Envoy kept a cluster deleted
// upstream).
func TestInFlightTP2AnswerAfterItsKeyEnded(t *testing.T) { inFlightTP2(t, false) }

// The plain subscription ends while c{env=prod}, which selects another
// variant, stays: that key is never sent the default variant, nor its
// deletion, yet counted as covering it (found by a review).
func TestInFlightPlainAnswerWhileOnlyAConstrainedKeyStays(t *testing.T) { inFlightTP2(t, true) }

func inFlightTP2(t *testing.T, prodStays bool) {
	up := xdstest.StartTP2(t)
	up.Set(resource.ClusterType, "c0", nil, xdstest.EDSCluster("c0", "eds0"))
	up.Set(resource.ClusterType, "c", nil, xdstest.EDSCluster("c", "eds"))
	up.Set(resource.ClusterType, "c", eq("env", "prod"), xdstest.EDSCluster("c", "eds-prod"))
	p := startGateProxy(t, up.Addr())
	r := xdstest.StartRelay(t, p.addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"}) // the type stays subscribed
	keeper.Subscribe(resource.ClusterType, []string{"c0"}, nil)
	keeper.Ack(keeper.MustRecv())
	stays := []string{"c0"}
	var ends interface{ Close() }
	if prodStays {
		prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
		prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
		prod.Ack(prod.RecvType(resource.ClusterType))
		stays = append(stays, "c{env=prod}")
		plain := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "plain"})
		plain.Subscribe(resource.ClusterType, []string{"c"}, nil)
		plain.Ack(plain.MustRecv())
		ends = plain
	} else {
		test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
		test.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "test"))
		test.Ack(test.RecvType(resource.ClusterType)) // the default variant
		ends = test
	}
	before := cachedVersion(r, "c")

	p.pause(true)
	up.Set(resource.ClusterType, "c", nil, xdstest.EDSCluster("c", "eds-next"))
	p.waitHeld(1) // the answer is on the wire
	ends.Close()
	xdstest.Eventually(t, func() bool { return slices.Equal(up.Subscriptions(resource.ClusterType), stays) },
		"upstream subscriptions", func() any { return up.Subscriptions(resource.ClusterType) })
	up.Delete(resource.ClusterType, "c", nil) // the server says nothing: nothing it answers selects it
	p.pause(false)
	xdstest.Eventually(t, func() bool { return cachedVersion(r, "c") != before },
		"the answer in flight applied", func() any { return r.DebugCache(relay.CacheFilter{Type: "Cluster"}) })

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{"c"}, nil)
	toldGone(t, named, "c")
}

// toldGone reads c's responses, ACKing each, until one removes name; it
// fails after 5 s: name was deleted upstream.
func toldGone(t *testing.T, c *xdstest.DeltaClient, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, ok := c.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("a client that named %s was never told it was deleted upstream", name)
		}
		c.Ack(resp)
		if _, removed := deltaNames(resp); slices.Contains(removed, name) {
			return
		}
	}
}

// A plain name whose only variant is constrained so that a subscriber
// without parameters selects it (not(exists(env))): its plain selection is a
// constrained variant, which the response path never confirms
// (e.Constraints != ""). Unsure once its subscription ended, it is taken for
// deleted when subscribed again, although the upstream sent it again.
func TestConstrainedPlainSelectionSubscribedAgain(t *testing.T) {
	up := xdstest.StartTP2(t)
	notEnv := &discoverygrpc.DynamicParameterConstraints{Type: &discoverygrpc.DynamicParameterConstraints_NotConstraints{
		NotConstraints: keying.ExistsConstraint("env")}}
	up.Set(resource.ClusterType, "c", notEnv, xdstest.EDSCluster("c", "eds"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"c"}, nil)
	first.Ack(first.MustRecv())
	first.Close()
	xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.ClusterType)) == 0 },
		"upstream subscriptions", func() any { return up.Subscriptions(resource.ClusterType) })
	if cachedVersion(r, "c") == "" {
		t.Fatal("c not kept in the cache")
	}

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{"c"}, nil)
	refuseRemovals(t, named, time.Now().Add(2*time.Second)) // c exists upstream
}

// SotW, no TP2: a response that answers a request still subscribing e (an
// EDS name, not full state) arrives after the relay unsubscribed e. It
// confirms e (the response path confirms every name of a SotW response),
// although the server, told e is no longer subscribed, would not tell the
// relay of its deletion, and its silence on e subscribed again proves
// nothing for EDS.
func TestInFlightSotWAnswerAfterItsSubscriptionEnded(t *testing.T) { inFlightSotW(t, true) }

// Control: without the push in flight, e is unsure and the wait removes it.
func TestSotWSubscriptionEndedControl(t *testing.T) { inFlightSotW(t, false) }

func inFlightSotW(t *testing.T, push bool) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	keeper := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.EndpointType, "e0")
	s := f.stream(t)
	s.nextNames(resource.EndpointType, "e0")
	s.send(resource.EndpointType, "1", xdstest.Endpoints("e0", "10.0.0.1:80"))
	keeper.Ack(keeper.RecvType(resource.EndpointType))

	first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.EndpointType, "e")
	s.nextNames(resource.EndpointType, "e0", "e")
	s.send(resource.EndpointType, "2", xdstest.Endpoints("e0", "10.0.0.1:80"), xdstest.Endpoints("e", "10.0.0.2:80"))
	first.Ack(first.RecvType(resource.EndpointType))
	first.Close()
	s.nextNames(resource.EndpointType, "e0") // e unsubscribed upstream, still cached
	// A push that answered the request with e, crossing the one without it.
	if push {
		s.send(resource.EndpointType, "3", xdstest.Endpoints("e0", "10.0.0.1:80"), xdstest.Endpoints("e", "10.0.0.3:80"))
	}
	// e is deleted upstream: the server says nothing, nothing subscribes it.
	xdstest.Eventually(t, func() bool {
		for _, en := range r.DebugCache(relay.CacheFilter{Type: "ClusterLoadAssignment"}) {
			if en.Name == "e" && en.Version != "" {
				return true
			}
		}
		return false
	}, "the push applied", func() any { return r.DebugCache(relay.CacheFilter{}) })
	time.Sleep(50 * time.Millisecond)

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.EndpointType, []string{"e"}, nil)
	s.nextNames(resource.EndpointType, "e0", "e")
	// Without the push, the server may answer the request without e, and
	// ignore this one: the answer to its ACK, which asks for e, says it is gone.
	s.send(resource.EndpointType, "4", xdstest.Endpoints("e0", "10.0.0.1:80"))
	s.nextNames(resource.EndpointType, "e0", "e")
	s.send(resource.EndpointType, "5", xdstest.Endpoints("e0", "10.0.0.1:80")) // no e: it is gone
	toldGone(t, named, "e")
}

// The control's silence takes the relay's copy of e for gone, yet it is not
// the upstream's word (the response without e may answer an older request,
// crossing the one that named e): a client that brought e from elsewhere
// keeps it, while one that holds nothing is told it does not exist.
func TestSotWSilenceKeepsWhatAClientHolds(t *testing.T) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	keeper := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.EndpointType, "e0")
	s := f.stream(t)
	s.nextNames(resource.EndpointType, "e0")
	s.send(resource.EndpointType, "1", xdstest.Endpoints("e0", "10.0.0.1:80"), xdstest.Endpoints("e", "10.0.0.2:80"))
	keeper.Ack(keeper.RecvType(resource.EndpointType)) // e cached, unsubscribed: unsure

	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"e"},
		InitialResourceVersions: map[string]string{"e": "v-elsewhere"}})
	s.nextNames(resource.EndpointType, "e0", "e")
	s.send(resource.EndpointType, "2", xdstest.Endpoints("e0", "10.0.0.1:80")) // no e
	fresh := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.EndpointType, []string{"e"}, nil)
	toldGone(t, fresh, "e")
	// The silence has acted (fresh was told); 1 s is five times the wait.
	refuseRemovals(t, moved, time.Now().Add(time.Second))
}

// A warm-restart file's TP2 name (in variant mode: it has a constrained
// variant) was never marked unsure on load (persist.go skipped variant-mode
// names), and a SotW upstream has no first-request declaration (declared)
// to mark it: its default variant, deleted upstream while the relay was
// down, is trusted and served for good to a client that names it (RDS: a
// SotW response without it proves nothing).
func TestWarmRestartSotWVariantModeNameDeletedWhileDown(t *testing.T) { warmRestartSotW(t, true) }

// Control: the same name without a constrained variant is unsure on load.
func TestWarmRestartSotWPlainNameDeletedWhileDownControl(t *testing.T) { warmRestartSotW(t, false) }

func warmRestartSotW(t *testing.T, variants bool) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	})
	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", nil, routes("default"))
	up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	plain := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "plain"})
	plain.Subscribe(resource.RouteType, "routes")
	plain.Ack(plain.RecvType(resource.RouteType))
	if variants {
		prod := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "prod"})
		prod.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod"))
		prod.Ack(prod.RecvType(resource.RouteType))
		prod.Close()
	}
	plain.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.Delete(resource.RouteType, "routes", nil) // the default variant goes while the relay is down

	second := xdstest.StartRelay(t, up.Addr(), opt)
	named := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.RouteType, []string{"routes"}, nil)
	toldGone(t, named, "routes")
}
