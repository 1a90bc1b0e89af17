package relay_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
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
