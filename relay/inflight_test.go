package relay_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/upstream"
)

// scriptedRelay starts a relay speaking SotW to a scripted upstream, with a
// short linger.
func scriptedRelay(t *testing.T) (*scriptedADS, *xdstest.Relay) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Linger = 20 * time.Millisecond
	}))
	return f, r
}

// An upstream SotW full-state response answers the request it followed: a
// push that crossed the relay's newer request on the wire does not delete
// what that newer request subscribed (and a client was just given).
func TestInFlightResponseKeepsResubscribed(t *testing.T) {
	f, r := scriptedRelay(t)
	c1 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c1"})
	c1.Subscribe(resource.ClusterType, "a")
	s := f.stream(t)
	s.nextNames(resource.ClusterType, "a")
	s.send(resource.ClusterType, "1", xdstest.EDSCluster("a", "a"))
	wantNames(t, c1.RecvType(resource.ClusterType), "a")

	// b is cached, then released: the relay unsubscribes it and keeps it.
	c2 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c2"})
	c2.Subscribe(resource.ClusterType, "b")
	s.nextNames(resource.ClusterType, "a", "b")
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("a", "a"), xdstest.EDSCluster("b", "b"))
	wantNames(t, c2.RecvType(resource.ClusterType), "b")
	c2.Close()
	s.nextNames(resource.ClusterType, "a")
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("a", "a"))

	// c3 wants b again: served from the cache, subscribed upstream — and a
	// push of the older subscription crosses that request.
	c3 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c3"})
	c3.Subscribe(resource.ClusterType, "b")
	wantNames(t, c3.RecvType(resource.ClusterType), "b")
	s.nextNames(resource.ClusterType, "a", "b")
	s.send(resource.ClusterType, "3", xdstest.EDSCluster("a", "a2"))
	c3.ExpectNoResponse(quiet)                  // b was not deleted: nothing to tell c3
	s.nextNames(resource.ClusterType, "a", "b") // the ACK, current again
	s.send(resource.ClusterType, "4", xdstest.EDSCluster("a", "a2"), xdstest.EDSCluster("b", "b2"))
	wantNames(t, c3.RecvType(resource.ClusterType), "b")
}

// A push that crossed the relay's request adding the wildcard answers the
// older, named subscription: it is not the full set, and a wildcard client
// is not told that everything else is gone.
func TestInFlightResponseIsNotTheWildcard(t *testing.T) {
	f, r := scriptedRelay(t)
	c1 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c1"})
	c1.Subscribe(resource.ClusterType, "a")
	s := f.stream(t)
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "1", xdstest.EDSCluster("a", "a"))
	wantNames(t, c1.RecvType(resource.ClusterType), "a")

	c4 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c4"})
	c4.Subscribe(resource.ClusterType, "*")
	s.nextNames(resource.ClusterType, "*", "a")
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("a", "a2")) // crossed the request
	s.nextNames(resource.ClusterType, "*", "a")                      // its ACK: current
	s.send(resource.ClusterType, "3", xdstest.EDSCluster("a", "a2"), xdstest.EDSCluster("b", "b"))
	wantNames(t, c4.RecvType(resource.ClusterType), "a", "b") // the first answer is the full set
}

// The same for a TP2 key: a full-state response that crossed the request
// adding env=test answers the older request, env=prod alone; that it holds
// a variant of the name, one env=test does not match, says nothing of
// env=test, and its subscriber is not told the cluster is gone (found by
// the oracle, seed 300013).
func TestInFlightResponseKeepsNewTP2Key(t *testing.T) {
	f, r := scriptedRelay(t)
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
	s := f.stream(t)
	if req := s.next(resource.ClusterType); len(req.GetResourceLocators()) != 1 {
		t.Fatalf("first request: %v", req)
	}
	test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
	test.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "test"))
	if req := s.next(resource.ClusterType); len(req.GetResourceLocators()) != 2 {
		t.Fatalf("second request: %v", req)
	}
	s.send(resource.ClusterType, "1", clusterVariant(t, eq("env", "prod"), "eds-prod")) // crossed the second request
	if resp := prod.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("prod: %v", resp)
	}
	test.ExpectNoResponse(quiet) // not told c is gone
	s.send(resource.ClusterType, "2", clusterVariant(t, eq("env", "prod"), "eds-prod"), clusterVariant(t, eq("env", "test"), "eds-test"))
	if resp := test.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("test: %v", resp)
	}
}

// And when the crossing response holds no variant of the name at all (the
// upstream deleted the env=prod variant its request asked for): env=prod's
// subscriber is told it is gone, env=test's is not.
func TestInFlightResponseWithoutTheNameKeepsNewTP2Key(t *testing.T) {
	f, r := scriptedRelay(t)
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
	s := f.stream(t)
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "1", clusterVariant(t, eq("env", "prod"), "eds-prod"))
	if resp := prod.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("prod: %v", resp)
	}
	test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
	test.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "test"))
	for len(s.next(resource.ClusterType).GetResourceLocators()) != 2 { // the ACK first
	}
	s.send(resource.ClusterType, "2") // crossed the request: env=prod deleted
	if resp := prod.RecvType(resource.ClusterType); len(resp.GetResources()) != 0 {
		t.Fatalf("prod after its variant was deleted: %v", resp)
	}
	test.ExpectNoResponse(quiet) // not told c is gone
	s.send(resource.ClusterType, "3", clusterVariant(t, eq("env", "test"), "eds-test"))
	if resp := test.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("test: %v", resp)
	}
}

// A variant that another key matches as well, the default one, says nothing
// of a key just added: two pushes for the older request cross it, the second
// without the name (the upstream deleted the default variant), and the new
// key's subscriber is not told the cluster is gone.
func TestInFlightSharedVariantIsNoAnswerForNewTP2Key(t *testing.T) {
	f, r := scriptedRelay(t)
	any := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "any"})
	any.Subscribe(resource.ClusterType, "c")
	s := f.stream(t)
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "1", clusterVariant(t, nil, "eds"))
	if resp := any.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("any: %v", resp)
	}
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
	if resp := prod.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("prod, from the cache: %v", resp) // the default variant matches it
	}
	for len(s.next(resource.ClusterType).GetResourceLocators()) != 1 { // the ACK first
	}
	s.send(resource.ClusterType, "2", clusterVariant(t, nil, "eds2")) // both cross the request
	s.send(resource.ClusterType, "3")
	for len(any.RecvType(resource.ClusterType).GetResources()) != 0 { // the update, maybe
	}
	for { // prod gets the update, maybe, and is not told c is gone
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		resp, err := prod.Recv(ctx)
		cancel()
		if err != nil {
			break
		}
		if len(resp.GetResources()) == 0 {
			t.Fatalf("prod told c is gone: %v", resp)
		}
	}
	s.send(resource.ClusterType, "4", clusterVariant(t, eq("env", "prod"), "eds-prod"))
	if resp := prod.RecvType(resource.ClusterType); len(resp.GetResources()) != 1 {
		t.Fatalf("prod: %v", resp)
	}
}

// clusterVariant is the TP2 variant of cluster "c" for constraints c, as an
// upstream sends it: wrapped in a Resource with its constraints.
func clusterVariant(t *testing.T, c *discoverygrpc.DynamicParameterConstraints, eds string) proto.Message {
	t.Helper()
	a, err := anypb.New(xdstest.EDSCluster("c", eds))
	if err != nil {
		t.Fatal(err)
	}
	return &discoverygrpc.Resource{Resource: a, ResourceName: &discoverygrpc.ResourceName{Name: "c", DynamicParameterConstraints: c}}
}

// A Delta response that the upstream client took for the wildcard's answer
// is applied only after the wildcard's linger ended, its set was evicted and
// a client from elsewhere subscribed it again. The server sent what changed
// from what it thought the relay held, which the cache no longer holds: the
// response is no word on the set, and the client, which brought l1 and l2,
// is not told they are gone (the oracle's seed 472138: an Envoy back on its
// relay was sent the removal of three listeners the upstream had).
func TestWildcardAnswerAppliedAfterTheWildcardCameBack(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(listeners("l1", "l2"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Cache.MaxUnreferenced = 0 // evicted once unwatched
	}))
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ListenerType, []string{"*"}, nil)
	versions := map[string]string{}
	for len(versions) < 2 {
		resp := first.MustRecv()
		for _, res := range resp.GetResources() {
			versions[res.GetName()] = res.GetVersion()
		}
		first.Ack(resp)
	}

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	relay.HoldApply(func(u upstream.Update) {
		for _, res := range u.Resources {
			if res.Name == "l3" {
				once.Do(func() { close(held); <-release })
			}
		}
	})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }); relay.HoldApply(nil) })
	up.SetResources(listeners("l1", "l2", "l3"))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's push of l3 never reached the relay")
	}
	nreq := len(up.Requests())
	first.Close() // the wildcard's linger ends at once; l1 and l2 are evicted
	up.WaitRequest(t, nreq, "the wildcard's unsubscription", func(r xdstest.Request) bool {
		return r.Delta != nil && slices.Contains(r.Delta.GetResourceNamesUnsubscribe(), "*")
	})
	nreq = len(up.Requests())
	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: versions})
	up.WaitRequest(t, nreq, "the wildcard subscribed again", func(r xdstest.Request) bool {
		return r.Delta != nil && slices.Contains(r.Delta.GetResourceNamesSubscribe(), "*")
	})
	released.Do(func() { close(release) })

	holds := xdstest.DeltaHolds{}
	for deadline := time.Now().Add(2 * time.Second); ; {
		resp, ok := moved.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("the client from elsewhere was told %v are gone; the upstream has l1, l2 and l3", removed)
		}
		holds.Apply(resp)
		moved.Ack(resp)
	}
	if !holds.Has("l3") {
		t.Fatalf("the client holds %v; the upstream added l3", holds)
	}
}

// listeners returns a Listener for each name.
func listeners(names ...string) xdstest.Resources {
	var rs []types.Resource
	for _, n := range names {
		rs = append(rs, xdstest.GRPCListener(n, "r-"+n))
	}
	return xdstest.Resources{resource.ListenerType: rs}
}
