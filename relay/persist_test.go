package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// A relay restarted with cache.persist_path serves its last cache at once,
// even with no upstream reachable; a damaged or foreign file is ignored.
func TestWarmRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	withPersist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })

	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	first := xdstest.StartRelay(t, up.Addr(), withPersist)
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	want := c.RecvType(resource.ClusterType)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), withPersist)
	c = xdstest.DialADS(t, second.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	got := c.RecvType(resource.ClusterType)
	wantNames(t, got, "c1", "c2")
	if got.GetVersionInfo() != want.GetVersionInfo() {
		t.Fatalf("version after restart %q, want %q (content-derived)", got.GetVersionInfo(), want.GetVersionInfo())
	}
	second.Close()

	// Flip one byte: the checksum fails and the file is ignored.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	third := xdstest.StartRelay(t, up.Addr(), withPersist)
	c = xdstest.DialADS(t, third.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	c.ExpectNoResponse(quiet) // nothing trusted, nothing cached, upstream down
	if len(third.DebugCache(relay.CacheFilter{})) != 0 {
		t.Fatal("a damaged file was loaded")
	}
}

// TP2 variants survive a warm restart: with no upstream reachable, a client
// with parameters gets the variant they select, with its constraints.
func TestWarmRestartVariants(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	withPersist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })

	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
	up.Set(resource.RouteType, "routes", eq("env", "test"), routes("test"))
	first := xdstest.StartRelay(t, up.Addr(), withPersist)
	for _, env := range []string{"prod", "test"} {
		c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: env})
		c.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", env))
		wantGot(t, env, recvRoutes(t, c), got{env, "env=" + env, true})
		c.Close()
	}
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), withPersist)
	c := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "after"})
	c.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "test", "zone", "a"))
	wantGot(t, "after restart", recvRoutes(t, c), got{"test", "env=test", true})
	if n := len(second.DebugCache(relay.CacheFilter{Type: "RouteConfiguration"})); n != 2 {
		t.Fatalf("%d variants cached after the restart, want 2", n)
	}
}

// A SotW full-state response speaks only for the keys it answers: after a
// warm restart, a CDS answer to the one locator c{env=prod} carries just
// that variant, and the file's default variant of c (the wildcard's) stays.
// The answer pruned it, so a wildcard client from elsewhere, served from the
// file's complete set, was sent an empty CDS.
func TestWarmRestartVariantAnswerKeepsTheDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "sotw"
	})
	body, err := anypb.New(xdstest.EDSCluster("c", "eds-prod"))
	if err != nil {
		t.Fatal(err)
	}
	prodVariant := &discoverygrpc.Resource{Resource: body,
		ResourceName: &discoverygrpc.ResourceName{Name: "c", DynamicParameterConstraints: eq("env", "prod")}}
	withLocator := func(s *scriptedStream) { // the request that subscribes the locator
		for req := s.next(resource.ClusterType); len(req.GetResourceLocators()) == 0; req = s.next(resource.ClusterType) {
			continue
		}
	}
	f, addr := startScripted(t)

	first := xdstest.StartRelay(t, addr, opt)
	s := f.stream(t)
	wild := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "1", xdstest.EDSCluster("c", "eds-default"))
	resp := wild.RecvType(resource.ClusterType)
	wantNames(t, resp, "c")
	prod := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
	withLocator(s)
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("c", "eds-default"), prodVariant)
	if n := len(prod.RecvType(resource.ClusterType).GetResources()); n != 1 {
		t.Fatalf("prod client: %d resources", n)
	}
	wild.Close()
	prod.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	second := xdstest.StartRelay(t, addr, opt)
	s = f.stream(t)
	prod = xdstest.DialADS(t, second.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c", "env", "prod"))
	withLocator(s)
	nonce := s.send(resource.ClusterType, "1", prodVariant) // the one key it answers
	for req := s.next(resource.ClusterType); req.GetResponseNonce() != nonce; req = s.next(resource.ClusterType) {
		continue // the relay ACKs once it applied the answer
	}
	wild = xdstest.DialADS(t, second.Addr(), &core.Node{Id: "wild"})
	wild.Resume(resource.ClusterType, resp.GetVersionInfo(), "*")
	// The server says nothing of the wildcard added mid-stream: the relay
	// asks on a new stream, whose first request carries "*".
	s = f.stream(t)
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("c", "eds-default"), prodVariant)
	wantNames(t, wild.RecvType(resource.ClusterType), "c")
}

// A warm-restart file's resource deleted upstream while the relay was down
// leaves the wildcard set even when the wildcard is subscribed after a name
// on the Delta upstream stream. It stayed in the wildcard set for good:
// first because the server, which removes only what it knows the relay
// holds, was not told of it; then, told of it in the type's first request,
// because go-control-plane forgets what that request did not subscribe to as
// soon as it answers. The relay declares only what the request subscribes
// to and keeps the rest unsure: what the wildcard does not bring is taken
// for deleted after upstream.does_not_exist_after.
func TestWarmRestartDeltaWildcardAfterName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"c1", "c2"}, nil)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.SetResources(clusters("c2")) // c1 goes while the relay is down

	second := xdstest.StartRelay(t, up.Addr(), opt)
	from := len(up.Requests())
	named := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{"c2"}, nil)
	up.WaitRequest(t, from, "the named CDS subscription", func(r xdstest.Request) bool {
		return r.IsDelta() && r.TypeURL() == resource.ClusterType && len(r.Names()) > 0
	})
	wild := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for !(len(held) == 1 && held["c2"]) {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want only c2: c1 was deleted upstream", held)
		}
		got, removed := deltaNames(resp)
		for _, n := range got {
			held[n] = true
		}
		for _, n := range removed {
			delete(held, n)
		}
		wild.Ack(resp)
	}
}

// The same when the upstream answers the name before the wildcard comes:
// go-control-plane then forgets every version the first request declared but
// did not subscribe to, and never says the deleted one is gone.
func TestWarmRestartDeltaWildcardAfterAnsweredName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"c1", "c2"}, nil)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	// While the relay is down c1 goes and c2 changes.
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c2", "eds-c2-next")}})

	second := xdstest.StartRelay(t, up.Addr(), opt)
	named := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{"c2"}, nil)
	for answered := false; !answered; { // the cached c2 first, perhaps
		resp := named.MustRecv()
		named.Ack(resp)
		for _, r := range resp.GetResources() {
			var got cluster.Cluster
			if err := r.GetResource().UnmarshalTo(&got); err != nil {
				t.Fatal(err)
			}
			answered = got.GetEdsClusterConfig().GetServiceName() == "eds-c2-next"
		}
	}
	wild := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	convergeTo(t, wild, "c2")
}

// A warm-restart file's cluster deleted upstream while the relay was down
// leaves the wildcard set once the upstream's answer proves the wildcard,
// added after a name on a SotW stream: it carries a cluster only the
// wildcard brings, so it is the whole set. (The settle time passing without
// that proves nothing, and deletes nothing: issue 23, item 3.)
func TestWarmRestartSotWWildcardSettles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	var mu sync.Mutex
	all := []string{"a", "old"}
	f := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range all {
			if len(names) > 0 && !slices.Contains(names, n) && !slices.Contains(names, "*") {
				continue
			}
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return nil, err
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}}
	addr := startFakeCDS(t, f)
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "sotw"
	})
	first := xdstest.StartRelay(t, addr, opt)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"a", "old"}, nil)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	mu.Lock()
	all = []string{"a", "b"} // old goes while the relay is down, b comes
	mu.Unlock()

	second := xdstest.StartRelay(t, addr, opt)
	named := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, "a")
	wantNames(t, named.RecvType(resource.ClusterType), "a")
	wild := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for !(len(held) == 2 && held["a"] && held["b"]) {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want a and b: old was deleted upstream", held)
		}
		got, removed := deltaNames(resp)
		for _, n := range got {
			held[n] = true
		}
		for _, n := range removed {
			delete(held, n)
		}
		wild.Ack(resp)
	}
}

// A warm-restart file's resource deleted upstream while the relay was down
// is taken for gone once a SotW upstream says nothing of it: subscribed
// after the type's first request on the stream, its absence from a
// full-state response is no proof (the response may answer the older
// request), so, as for a name the cache knows nothing of, the upstream's
// silence for does_not_exist_after decides. It was served for good.
func TestWarmRestartSotWNamedAfterFirstRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.DoesNotExistAfter = 300 * time.Millisecond
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1", "c2")
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.SetResources(clusters("c2")) // c1 goes while the relay is down

	second := xdstest.StartRelay(t, up.Addr(), opt)
	from := len(up.Requests())
	other := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "c2")
	up.WaitRequest(t, from, "the first CDS request", func(r xdstest.Request) bool {
		return !r.IsDelta() && r.TypeURL() == resource.ClusterType && len(r.Names()) > 0
	})
	other.Ack(other.RecvType(resource.ClusterType))
	named := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, "c1")
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		resp, err := named.Recv(ctx)
		cancel()
		if err != nil {
			t.Fatalf("the client was never told that c1 is gone: %v", err)
		}
		named.Ack(resp)
		if len(names(t, resp)) == 0 {
			return
		}
	}
}

// A warm-restart file's resource that still exists upstream is not taken
// for gone when a Delta server, told the relay holds it, does not send it
// again.
func TestWarmRestartDeltaToldIsSure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"c1", "c2"}, nil)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	second := xdstest.StartRelay(t, up.Addr(), opt)
	named := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	refuseRemovals(t, named, time.Now().Add(4*quiet))
}

// A warm restart keeps the upstream's spelling of a name: with no upstream
// reachable, a Delta wildcard client is given the default servers' listed,
// Envoy-spelled xdstp name as they spelled it, not the relay's canonical key
// (issue 23, item 12).
func TestWarmRestartKeepsTheUpstreamsSpelling(t *testing.T) {
	const envoy = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c0", envoy))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"c0", envoy}, nil)
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), opt)
	c = xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, []string{"*"}, nil)
	wantDelta(t, c.MustRecv(), []string{"c0", envoy}, nil)
}
