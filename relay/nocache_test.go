package relay_test

import (
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// startNoCacheUpstream serves the clusters "shared" and "personal"; the
// latter is marked do_not_cache and tailored to the requesting node (its EDS
// service is "eds-NODE").
func startNoCacheUpstream(t *testing.T) (*fakeCDS, string) {
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		if len(names) == 0 {
			names = []string{"personal", "shared"} // wildcard
		}
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range names {
			switch n {
			case "shared":
				a, err := anypb.New(xdstest.EDSCluster(n, "eds-shared"))
				if err != nil {
					return nil, err
				}
				resp.Resources = append(resp.Resources, a)
			case "personal":
				inner, err := anypb.New(xdstest.EDSCluster(n, "eds-"+node.GetId()))
				if err != nil {
					return nil, err
				}
				a, err := anypb.New(&discoverygrpc.Resource{Name: n, Resource: inner,
					CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}})
				if err != nil {
					return nil, err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		return resp, nil
	}}
	return f, startFakeCDS(t, f)
}

// edsNames maps each cluster of a CDS response to its EDS service name.
func edsNames(t *testing.T, resp *discoverygrpc.DiscoveryResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range resp.GetResources() {
		c := &cluster.Cluster{}
		if err := proto.Unmarshal(a.GetValue(), c); err != nil {
			t.Fatal(err)
		}
		out[c.GetName()] = c.GetEdsClusterConfig().GetServiceName()
	}
	return out
}

// recvClusters ACKs CDS responses until one maps the clusters as want.
func recvClusters(t *testing.T, c *xdstest.ADSClient, want map[string]string) {
	t.Helper()
	var last map[string]string
	for range 5 {
		resp := c.RecvType(resource.ClusterType)
		c.Ack(resp)
		if last = edsNames(t, resp); maps.Equal(last, want) {
			return
		}
	}
	t.Fatalf("CDS state %v, want %v", last, want)
}

func cachedIn(r *xdstest.Relay, scope, name string) bool {
	for _, e := range r.DebugCache(relay.CacheFilter{Type: resource.ClusterType}) {
		if e.Scope == scope && e.Name == name {
			return true
		}
	}
	return false
}

// Resource.cache_control.do_not_cache: each client gets its own copy through
// its own upstream subscription (presenting its own node), the shared cache
// never holds it, LDS/CDS full state still carries every other resource, and
// the copy is dropped with the client's last watch.
func TestDoNotCache(t *testing.T) {
	up, addr := startNoCacheUpstream(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, "shared", "personal")
	recvClusters(t, a, map[string]string{"shared": "eds-shared", "personal": "eds-a"})

	b := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b"})
	b.Subscribe(resource.ClusterType, "shared", "personal")
	recvClusters(t, b, map[string]string{"shared": "eds-shared", "personal": "eds-b"})

	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c"})
	wild.Subscribe(resource.ClusterType)
	recvClusters(t, wild, map[string]string{"shared": "eds-shared", "personal": "eds-c"})

	if cachedIn(r, "", "personal") {
		t.Fatal("the shared cache holds a do_not_cache resource")
	}
	up.mu.Lock()
	nodes := slices.Clone(up.nodes)
	up.mu.Unlock()
	for _, id := range []string{"a", "b", "c"} {
		if !slices.Contains(nodes, id) {
			t.Errorf("the upstream saw no subscription of node %q (saw %v)", id, nodes)
		}
	}

	// The copy lives while the client watches it.
	if !cachedIn(r, "node:a", "personal") {
		t.Fatal("node a's own scope does not hold its copy")
	}
	a.Subscribe(resource.ClusterType, "shared")
	recvClusters(t, a, map[string]string{"shared": "eds-shared"})
	xdstest.Eventually(t, func() bool { return !cachedIn(r, "node:a", "personal") }, "node a's copy kept after its last watch", nil)
	b.ExpectNoResponse(quiet)
}

// A do_not_cache cluster of another authority that the default servers list
// in their wildcard answer moves the wildcard clients to their own scopes,
// as one of the default authority does: the group scope dropped it and left
// them where they were, and a wildcard Envoy never got it (issue 23, item 5).
func TestDoNotCacheListedNameOfAnotherAuthority(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/personal"
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		if len(names) == 0 || slices.Contains(names, "*") {
			names = []string{"shared", x} // the wildcard lists x too
		}
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range names {
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-shared"))
			if n == x {
				inner, ierr := anypb.New(xdstest.EDSCluster(n, "eds-"+node.GetId()))
				if ierr != nil {
					return nil, ierr
				}
				a, err = anypb.New(&discoverygrpc.Resource{Name: n, Resource: inner,
					CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}})
			}
			if err != nil {
				return nil, err
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}}
	r := xdstest.StartRelay(t, startFakeCDS(t, f), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {}} // served by the default servers
	}))
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "c"})
	wild.Subscribe(resource.ClusterType)
	recvClusters(t, wild, map[string]string{"shared": "eds-shared", x: "eds-c"})
	if cachedIn(r, "", x) {
		t.Fatal("the shared cache holds a do_not_cache resource")
	}
}

// A shared scope never stores a do_not_cache resource, so the wildcard set
// it holds is not the whole set once one is in it: not while it runs, and
// not in its warm-restart file, where it once said so — and a client that
// asked for the do_not_cache name after a restart was told at once that it
// did not exist.
func TestDoNotCacheSharedSetNotComplete(t *testing.T) {
	_, addr := startNoCacheUpstream(t)
	path := filepath.Join(t.TempDir(), "cache")
	cfg := xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Cache.PersistPath = path
		c.Cache.MaxUnreferenced = 10
	})
	first := xdstest.StartRelay(t, addr, cfg)
	wild := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "c"})
	wild.Subscribe(resource.ClusterType)
	recvClusters(t, wild, map[string]string{"shared": "eds-shared", "personal": "eds-c"})
	wild.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	second := xdstest.StartRelay(t, addr, cfg)
	d := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "d"})
	d.Subscribe(resource.ClusterType, []string{"personal"}, nil)
	wantDelta(t, d.MustRecv(), []string{"personal"}, nil)
}

// A wildcard client moved to its own scope by a do_not_cache resource is
// told of what arrived with it: the seed of its own View carried a new
// cluster it had not been sent, and its own upstream, told the relay held
// it, never sent it again — the client never got it.
func TestDoNotCacheMoveCarriesItsUpdate(t *testing.T) {
	var mu sync.Mutex
	all := []string{"shared"}
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		return noCacheAnswer(all, names)
	}}
	addr := startFakeCDS(t, f)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := wild.MustRecv()
	wantDelta(t, resp, []string{"shared"}, nil)
	held := xdstest.DeltaHolds{}
	held.Apply(resp)
	wild.Ack(resp)

	mu.Lock()
	all = []string{"extra", "personal", "shared"}
	mu.Unlock()
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "other") // the shared scope asks again: extra and personal arrive
	deadline := time.Now().Add(5 * time.Second)
	for len(held) != 3 {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want extra, personal and shared", held)
		}
		held.Apply(resp)
		wild.Ack(resp)
	}
}

// A wildcard client moved to its own scope by a do_not_cache resource is
// still told of the update that moved it: a cluster deleted in it stayed
// with the client for good.
func TestDoNotCacheMoveCarriesItsRemoval(t *testing.T) {
	var mu sync.Mutex
	all := []string{"old", "shared"}
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		return noCacheAnswer(all, names)
	}}
	addr := startFakeCDS(t, f)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := wild.MustRecv()
	wantDelta(t, resp, []string{"old", "shared"}, nil)
	wild.Ack(resp)

	mu.Lock()
	all = []string{"personal", "shared"} // old goes, personal comes
	mu.Unlock()
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "other") // the shared scope asks again
	held := map[string]bool{"old": true, "shared": true}
	deadline := time.Now().Add(5 * time.Second)
	for !(len(held) == 2 && held["personal"] && held["shared"]) {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want personal and shared", held)
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

// noCacheAnswer answers a CDS subscription to names (the wildcard: empty or
// "*") from the clusters all; "personal" is do_not_cache.
func noCacheAnswer(all, names []string) (*discoverygrpc.DiscoveryResponse, error) {
	resp := &discoverygrpc.DiscoveryResponse{}
	for _, n := range all {
		if len(names) > 0 && !slices.Contains(names, n) && !slices.Contains(names, "*") {
			continue
		}
		inner, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
		if err != nil {
			return nil, err
		}
		a := inner
		if n == "personal" {
			if a, err = anypb.New(&discoverygrpc.Resource{Name: n, Resource: inner,
				CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}}); err != nil {
				return nil, err
			}
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp, nil
}

// A wildcard client moved to its own scope by a do_not_cache resource is
// told that another authority's name it held through the wildcard alone is
// gone when the default servers' first answer to its own scope no longer
// lists it: the own View is not seeded with such a name (its own authority's
// stream delivered it to the group scope), never listed it as changed, and
// the client kept it for good.
func TestDoNotCacheMoveUnlistsAnotherAuthoritysName(t *testing.T) {
	x := globAuth + "g/x"
	var mu sync.Mutex
	all := []string{"shared", x}
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		resp, err := noCacheAnswer(all, names)
		if slices.Contains(names, "other") {
			all = []string{"personal", "shared"} // x leaves the listing right after the answer that moves
		}
		return resp, err
	}}
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(x)))
	r := xdstest.StartRelay(t, startFakeCDS(t, f), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := wild.MustRecv()
	wantDelta(t, resp, []string{"shared", x}, nil)
	held := xdstest.DeltaHolds{}
	held.Apply(resp)
	wild.Ack(resp)
	// x's own authority delivers it too: the group scope holds it as its.
	g := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "g"})
	g.Subscribe(resource.ClusterType, []string{globG}, nil)
	wantDelta(t, g.MustRecv(), []string{x}, nil)

	mu.Lock()
	all = []string{"personal", "shared", x}
	mu.Unlock()
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "other"})
	other.Subscribe(resource.ClusterType, "other") // the shared scope asks again: personal arrives
	deadline := time.Now().Add(20 * time.Second)
	for !(len(held) == 2 && held.Has("personal") && held.Has("shared")) {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want personal and shared", held)
		}
		held.Apply(resp)
		wild.Ack(resp)
	}
}
