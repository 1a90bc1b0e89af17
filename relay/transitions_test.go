package relay_test

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A server says "gone" only for what it knows does not exist upstream. A
// Delta client reconnecting with the versions it holds to a relay whose cache
// does not hold them (restart, new replica) while the upstream is away keeps
// them: no removal, named or wildcard; it gets them when the upstream answers.
func TestDeltaReconnectColdCache(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	up.Stop()
	r := xdstest.StartRelay(t, up.Addr())

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"c1"}, InitialResourceVersions: map[string]string{"c1": "v-elsewhere"}})
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{"c1": "v-elsewhere", "c2": "v-elsewhere"}})
	named.ExpectNoResponse(quiet)
	wild.ExpectNoResponse(quiet)

	up.Restart()
	wantDelta(t, named.MustRecv(), []string{"c1"}, nil)
	wantDelta(t, wild.MustRecv(), []string{"c1", "c2"}, nil)
}

// The same from a warm cache that is older than what the client holds: the
// file lacks c2, the client has it (from another replica), the upstream is
// away. The relay keeps what it has for new clients, but tells a client that
// holds more nothing until its upstream confirms the set.
func TestDeltaReconnectStaleWarmCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	withPersist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	first := xdstest.StartRelay(t, up.Addr(), withPersist)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := c.MustRecv()
	wantDelta(t, resp, []string{"c1"}, nil)
	c1 := resp.GetResources()[0].GetVersion()
	c.Close()
	if err := first.Close(); err != nil { // writes the file: {c1}, complete
		t.Fatal(err)
	}
	up.SetResources(clusters("c1", "c2"))
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), withPersist)
	c = xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "n"})
	c.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c1": c1, "c2": "v-from-a-newer-replica"}})
	// The wildcard may be answered (with what changed: nothing), but c2 is
	// not removed.
	if resp, ok := c.TryRecv(quiet); ok {
		wantDelta(t, resp, nil, nil)
	}
	up.Restart()
	wantDelta(t, c.MustRecv(), []string{"c2"}, nil)
}

// grpc-go keeps its resource cache across streams: after a reconnect the
// first LDS/CDS response must hold every name it subscribed that exists, or
// none of them yet. A relay that caches c1 but not c2 answers a client that
// moved to it holding both with nothing until it knows c2.
func TestSotWReconnectHalfKnownCache(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	r := xdstest.StartRelay(t, up.Addr())
	warm := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "warm"})
	warm.Subscribe(resource.ClusterType, "c1")
	wantNames(t, warm.RecvType(resource.ClusterType), "c1")
	up.Stop()

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-from-another-replica", "c1", "c2")
	moved.ExpectNoResponse(quiet)

	// A new client (it holds nothing) gets what is known at once.
	fresh := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.ClusterType, "c1", "c2")
	wantNames(t, fresh.RecvType(resource.ClusterType), "c1")

	up.Restart()
	wantNames(t, moved.RecvType(resource.ClusterType), "c1", "c2")
	wantNames(t, fresh.RecvType(resource.ClusterType), "c1", "c2")
}

// A SotW wildcard client that reconnects holding a version gets nothing from
// a warm cache its upstream has not confirmed; a new client gets the cache.
func TestSotWReconnectStaleWarmCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	withPersist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	first := xdstest.StartRelay(t, up.Addr(), withPersist)
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	c.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	up.SetResources(clusters("c1", "c2"))
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), withPersist)
	moved := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-from-a-newer-replica")
	moved.ExpectNoResponse(quiet)
	fresh := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.ClusterType)
	wantNames(t, fresh.RecvType(resource.ClusterType), "c1") // fail static

	up.Restart()
	wantNames(t, moved.RecvType(resource.ClusterType), "c1", "c2")
	wantNames(t, fresh.RecvType(resource.ClusterType), "c1", "c2")
}

// A SotW upstream never says that a named resource does not exist: it leaves
// it out. Once connected and answered, a name it says nothing of for
// upstream.does_not_exist_after is taken as not existing (as clients do with
// their own timer), so a client that came with a route to a cluster that
// never existed is not held back forever.
func TestNameThatNeverExists(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.DoesNotExistAfter = 300 * time.Millisecond
	}))
	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-from-another-replica", "c1", "c9")
	wantNames(t, moved.RecvType(resource.ClusterType), "c1")

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(resource.ClusterType, []string{"c9"}, nil)
	wantDelta(t, d.MustRecv(), nil, []string{"c9"}) // known at once now
}

// Silence is not the upstream's word (issue 23, item 3). A SotW upstream
// answers the named subscription but is slow to answer once the relay adds
// "*" for a wildcard client: the settle time passes with nothing but the named
// answer. A client that holds nothing may get that, but a SotW wildcard client
// from another replica is not answered without c2 and c3, and a Delta client
// that brought c2 is not told it is gone; both get the whole set once the
// upstream answers the wildcard.
func TestSettleIsNotTheWildcardsWord(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	f := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		if !slices.Contains(names, "*") {
			return sotwClusters(t, "c1"), nil
		}
		<-release // slow to answer the wildcard
		return sotwClusters(t, "c1", "c2", "c3"), nil
	}}
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	r := xdstest.StartRelay(t, startFakeCDS(t, f), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
	}))
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "grpc"})
	named.Subscribe(resource.ClusterType, "c1")
	wantNames(t, named.RecvType(resource.ClusterType), "c1")

	moved := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
	moved.Resume(resource.ClusterType, "v-elsewhere")
	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c2": "v-elsewhere"}})
	fresh := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.ClusterType)
	// The fresh client holds nothing: the set settled by silence is its answer.
	first := fresh.RecvType(resource.ClusterType)
	wantNames(t, first, "c1")
	fresh.Ack(first)
	// Well past the settle time (250 ms) the others lost nothing: the CDS
	// stream at once, the ADS one past the second make before break gives
	// a client from elsewhere to ask for what refers to its clusters.
	moved.ExpectNoResponse(quiet)
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		resp, ok := d.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("the Delta client was told %v are gone: only the upstream's silence said so", removed)
		}
		d.Ack(resp)
	}

	once.Do(func() { close(release) })
	wantNames(t, moved.RecvType(resource.ClusterType), "c1", "c2", "c3")
	wantNames(t, fresh.RecvType(resource.ClusterType), "c1", "c2", "c3")
}

// sotwClusters is a SotW CDS response carrying the named EDS clusters.
func sotwClusters(t *testing.T, names ...string) *discoverygrpc.DiscoveryResponse {
	t.Helper()
	resp := &discoverygrpc.DiscoveryResponse{}
	for _, n := range names {
		a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

// The does-not-exist timer is not the upstream's word (issue 23, item 4). The
// upstream is connected but answers nothing (go-control-plane with no
// snapshot for the relay's node). Past upstream.does_not_exist_after a client
// that holds nothing of e0 may be told it does not exist — grpc clients wait
// for that — but a Delta client that brought e0 from another replica is not
// told it is gone; it gets e0 when the upstream sends it.
func TestDoesNotExistTimerRemovesNothingHeld(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.DoesNotExistAfter = 300 * time.Millisecond
	}))
	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"e0"},
		InitialResourceVersions: map[string]string{"e0": "v-elsewhere"}})

	fresh := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.ClusterType, []string{"e0"}, nil)
	wantDelta(t, fresh.MustRecv(), nil, []string{"e0"}) // not found yet: it holds nothing
	grpc := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "grpc"})
	grpc.Subscribe(resource.ClusterType, "e0")
	wantNames(t, grpc.RecvType(resource.ClusterType))

	// Past the timer, and the second make before break gives a client from
	// elsewhere, the moved client still holds e0.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		resp, ok := moved.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("the client that brought e0 was told %v are gone: only the relay's timer said so", removed)
		}
		moved.Ack(resp)
	}
	up.SetResources(clusters("e0"))
	wantDelta(t, moved.MustRecv(), []string{"e0"}, nil)
}

// The same with a SotW upstream and a type it answers name by name (EDS):
// no response proves such a name absent, yet its silence is not its word
// either — the server may be slow, behind a large response on an ordered ADS
// stream (final soak seed 340994: a Delta client that came holding 10,007
// endpoints was told every one was gone while the server sent a
// 10,009-cluster CDS response first). A client that holds none of e0 may be
// told it is not found yet; the one that brought it keeps it.
func TestSotWUpstreamSilenceRemovesNothingHeld(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.DoesNotExistAfter = 300 * time.Millisecond
	}))
	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"e0"},
		InitialResourceVersions: map[string]string{"e0": "v-elsewhere"}})

	fresh := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "fresh"})
	fresh.Subscribe(resource.EndpointType, []string{"e0"}, nil)
	wantDelta(t, fresh.MustRecv(), nil, []string{"e0"}) // not found yet: it holds nothing

	// Past the timer (the fresh client was told), the moved client still
	// holds e0: 1.5 s is five times the timer.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		resp, ok := moved.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("the client that brought e0 was told %v are gone: only the SotW server's silence said so", removed)
		}
		moved.Ack(resp)
	}
	up.SetResources(xdstest.Resources{resource.EndpointType: {xdstest.Endpoints("e0", "127.0.0.1:1")}})
	wantDelta(t, moved.MustRecv(), []string{"e0"}, nil)
}

// A SotW server's silence on an EDS name takes the relay's cached copy for
// deleted (the protocol's limit: no response proves it absent) only once
// the server answered the type since the relay asked for the name: before
// that it has said nothing at all (final soak seed 340994: the ordered
// server answered RDS behind a 10,009-cluster CDS response, and 600 ms after
// the relay subscribed r5 again its cached copy, unsure since the
// subscription had ended, was taken for deleted and the Delta client that
// held r5 was told it was gone).
func TestSotWSilenceBeforeTheAnswerKeepsTheCachedCopy(t *testing.T) {
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
	s.nextNames(resource.EndpointType, "e0") // e unsubscribed upstream, still cached (unsure)

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.EndpointType, []string{"e"}, nil)
	s.nextNames(resource.EndpointType, "e0", "e")
	// The server is slow: nothing for five times the wait.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		resp, ok := named.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("a client that named e was told %v are gone before the server answered the type", removed)
		}
		named.Ack(resp)
	}
	s.send(resource.EndpointType, "3", xdstest.Endpoints("e0", "10.0.0.1:80"), xdstest.Endpoints("e", "10.0.0.2:80"))
	named.ExpectNoResponse(quiet) // it holds e at that version: nothing to tell
}

// A SotW server ignores a request that does not carry the nonce of its
// latest response, so a response answers, at best, the first request that
// carried the nonce of the one before it. Here the relay unsubscribes e and
// names it again under the same nonce; the server answers the request
// without e and is then slow: that answer says nothing of e, and a client
// the relay served its cached copy of e keeps it (soak seed 501161: the
// answer to a new stream's first RDS request, which did not name r12, took
// the relay's copy of r12, named by the second, for deleted, and a client
// that moved in holding it was told it was gone).
func TestSotWAnswerToAnEarlierRequestKeepsTheCachedCopy(t *testing.T) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	e0, e := xdstest.Endpoints("e0", "10.0.0.1:80"), xdstest.Endpoints("e", "10.0.0.2:80")
	keeper := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.EndpointType, "e0")
	s := f.stream(t)
	s.nextNames(resource.EndpointType, "e0")
	s.send(resource.EndpointType, "1", e0)
	keeper.Ack(keeper.RecvType(resource.EndpointType))
	first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.EndpointType, "e")
	s.nextNames(resource.EndpointType, "e0", "e")
	s.send(resource.EndpointType, "2", e0, e)
	first.Ack(first.RecvType(resource.EndpointType))
	first.Close()
	s.nextNames(resource.EndpointType, "e0") // e unsubscribed upstream, still cached (unsure)

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.EndpointType, []string{"e"}, nil)
	s.nextNames(resource.EndpointType, "e0", "e") // the nonce of "2" again: the server ignores it
	s.send(resource.EndpointType, "3", e0)        // the answer to the request without e
	// The server is slow: nothing more for five times the wait.
	refuseRemovals(t, named, time.Now().Add(time.Second))
	s.nextNames(resource.EndpointType, "e0", "e") // the ACK of "3" asks for e
	s.send(resource.EndpointType, "4", e0, e)
	refuseRemovals(t, named, time.Now().Add(quiet))
}
