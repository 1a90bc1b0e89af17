package relay_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// No rollback: a Delta client that comes from a replica whose upstream had a
// newer cluster (initial_resource_versions names another version) is not
// sent the relay's copy while the relay's upstream is away — it may be
// older — and gets the upstream's word once it is back. It was sent the
// older copy at once.
func TestDeltaNoRollbackFromUnconfirmedCopy(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	a := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	a.Ack(a.MustRecv())

	up.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"server": up.Addr()}) > 0
	}, "the upstream's stream gone", nil)

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"c1"},
		InitialResourceVersions: map[string]string{"c1": "v-elsewhere"}})
	for deadline := time.Now().Add(quiet); time.Now().Before(deadline); {
		if resp, ok := d.TryRecv(50 * time.Millisecond); ok {
			for _, res := range resp.GetResources() {
				t.Fatalf("sent %s at the relay's unconfirmed version %s over the client's own", res.GetName(), res.GetVersion())
			}
			d.Ack(resp)
		}
	}

	newer := xdstest.EDSCluster("c1", "eds-newer")
	up.SetResources(xdstest.Resources{resource.ClusterType: []types.Resource{newer}})
	up.Restart()
	for {
		resp := d.MustRecv()
		d.Ack(resp)
		for _, res := range resp.GetResources() {
			c := &cluster.Cluster{}
			if err := res.GetResource().UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			if got := c.GetEdsClusterConfig().GetServiceName(); got != "eds-newer" {
				t.Fatalf("sent c1 with service %q, want the upstream's eds-newer", got)
			}
			return
		}
	}
}

// No rollback on SotW either, for the types whose responses carry only what
// changed (EDS, RDS): a client that comes from another replica (its first
// request carries a version) is not sent the relay's copy of endpoints while
// the relay's upstream is away — it may be older than the client's — and
// gets the upstream's word once it is back.
func TestSotWNoRollbackFromUnconfirmedCopy(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.EndpointType: []types.Resource{xdstest.Endpoints("e1", "127.0.0.1:1")}})
	r := xdstest.StartRelay(t, up.Addr())
	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.EndpointType, "e1")
	a.Ack(a.MustRecv())

	up.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"server": up.Addr()}) > 0
	}, "the upstream's stream gone", nil)

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.EndpointType, "v-elsewhere", "e1")
	// The relay answers a subscription from its cache at once: a quiet
	// while shows it holds the answer back.
	moved.ExpectNoResponse(quiet)

	up.SetResources(xdstest.Resources{resource.EndpointType: []types.Resource{xdstest.Endpoints("e1", "127.0.0.1:2")}})
	up.Restart()
	resp := moved.MustRecv()
	moved.Ack(resp)
	for _, a := range resp.GetResources() {
		e := &endpoint.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(e); err != nil {
			t.Fatal(err)
		}
		got := e.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		if got != 2 {
			t.Fatalf("sent e1 with port %d, want the upstream's 2", got)
		}
		return
	}
	t.Fatal("a response without e1")
}

// No rollback after the upstream's stream comes back either, on a SotW
// type that is not full state (the oracle's seed 360455): the first EDS
// response on the new stream carries e2 but not e1 (the upstream changed e1
// while the relay was away, then deleted it). That confirms e2, not e1: a
// Delta client from another replica that brings a newer e1 is not sent the
// relay's copy from before the outage, and gets e1 once the upstream sends
// it. It was sent the older copy at once.
func TestSotWNoRollbackAfterReconnect(t *testing.T) {
	f := &scriptedADS{streams: make(chan *scriptedStream, 8)}
	up := xdstest.StartUpstream(t, xdstest.WithADS(f))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
	}))
	a := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.EndpointType, []string{"e1", "e2"}, nil)
	s := f.stream(t)
	s.nextNames(resource.EndpointType, "e1", "e2")
	s.send(resource.EndpointType, "1", xdstest.Endpoints("e1", "127.0.0.1:1"), xdstest.Endpoints("e2", "127.0.0.1:1"))
	a.Ack(a.MustRecv())

	up.Restart() // the relay's stream ends; it comes back to a new one
	s = f.stream(t)
	s.nextNames(resource.EndpointType, "e1", "e2")
	nonce := s.send(resource.EndpointType, "3", xdstest.Endpoints("e2", "127.0.0.1:3"))
	for s.next(resource.EndpointType).GetResponseNonce() != nonce {
		// The relay ACKs a response once it has applied it.
	}

	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"e1", "e2"},
		InitialResourceVersions: map[string]string{"e1": "v-elsewhere"}})
	resp := moved.MustRecv() // one response answers the subscription from the cache
	moved.Ack(resp)
	for _, res := range resp.GetResources() {
		if res.GetName() == "e1" {
			t.Fatalf("sent e1 with port %d, the relay's copy from before its upstream went away, over the client's own", endpointPort(t, res.GetResource()))
		}
	}

	s.send(resource.EndpointType, "4", xdstest.Endpoints("e1", "127.0.0.1:4"), xdstest.Endpoints("e2", "127.0.0.1:3"))
	for {
		resp := moved.MustRecv()
		moved.Ack(resp)
		for _, res := range resp.GetResources() {
			if res.GetName() == "e1" {
				if got := endpointPort(t, res.GetResource()); got != 4 {
					t.Fatalf("sent e1 with port %d, want the upstream's 4", got)
				}
				return
			}
		}
	}
}

// No rollback from an unsure copy either (issue 23; the oracle's seeds 81451,
// 80719 and 81638): the relay's upstream is live, but the name's
// subscription ended and the upstream changed it meanwhile, so the cached
// copy is older than the one a client from another replica brings. It is
// not sent until the upstream answers the new subscription; when the
// upstream still has what the relay cached (unchanged), the client gets
// that once the upstream confirms it.
func TestNoRollbackFromUnsureCopy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		delta   bool
		changed bool
	}{
		{"delta-changed", true, true},
		{"delta-unchanged", true, false},
		{"sotw-eds-changed", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typeURL, old, newer := resource.ClusterType, types.Resource(xdstest.EDSCluster("c1", "eds-old")), types.Resource(xdstest.EDSCluster("c1", "eds-newer"))
			if !tc.delta {
				typeURL, old, newer = resource.EndpointType, xdstest.Endpoints("c1", "127.0.0.1:1"), xdstest.Endpoints("c1", "127.0.0.1:2")
			}
			if !tc.changed {
				newer = old
			}
			up := xdstest.StartUpstream(t)
			up.SetResources(xdstest.Resources{typeURL: []types.Resource{old}})
			r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.XDSServers[0].Protocol = "delta"
				c.Upstream.Linger = 0
			}))
			first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
			first.Subscribe(typeURL, []string{"c1"}, nil)
			first.Ack(first.MustRecv())
			first.Close()
			up.WaitRequest(t, 0, "c1 unsubscribed upstream", func(req xdstest.Request) bool {
				return slices.Contains(req.Delta.GetResourceNamesUnsubscribe(), "c1")
			})
			up.SetResources(xdstest.Resources{typeURL: []types.Resource{newer}}) // the relay is not told

			want := bodyOf(t, newer)
			var got []byte
			if tc.delta {
				d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
				d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: []string{"c1"},
					InitialResourceVersions: map[string]string{"c1": "v-elsewhere"}})
				resp := d.MustRecv()
				d.Ack(resp)
				if len(resp.GetResources()) != 1 {
					t.Fatalf("first response: %d resources, want c1", len(resp.GetResources()))
				}
				got = resp.GetResources()[0].GetResource().GetValue()
			} else {
				moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
				moved.Resume(typeURL, "v-elsewhere", "c1")
				resp := moved.MustRecv()
				moved.Ack(resp)
				if len(resp.GetResources()) != 1 {
					t.Fatalf("first response: %d resources, want c1", len(resp.GetResources()))
				}
				got = resp.GetResources()[0].GetValue()
			}
			if bytes.Equal(got, bodyOf(t, old)) && tc.changed {
				t.Fatal("sent c1 as the relay cached it before its subscription ended, older than the client's: a rollback")
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("sent c1 %x, want the upstream's %x (the relay's unsure copy: %x)", got, want, bodyOf(t, old))
			}
		})
	}
}

// bodyOf returns m's deterministic encoding, as the relay passes it on.
func bodyOf(t *testing.T, m types.Resource) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The same for a TP2 variant (the oracle's seed 80719): the subscription of
// c{env=prod} ended and the upstream changed that variant meanwhile; a SotW
// client from another replica that brings it is not sent the relay's older
// selection.
func TestNoRollbackFromUnsureTP2Variant(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.EndpointType, "c", nil, xdstest.Endpoints("c", "127.0.0.1:1"))
	up.Set(resource.EndpointType, "c", eq("env", "prod"), xdstest.Endpoints("c", "127.0.0.1:10"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
	}))
	prod := xdstest.Locator("c", "env", "prod")
	first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
	first.SubscribeLocators(resource.EndpointType, nil, prod)
	first.Ack(first.RecvType(resource.EndpointType))
	first.Close()
	xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.EndpointType)) == 0 },
		"c{env=prod} unsubscribed upstream", func() any { return up.Subscriptions(resource.EndpointType) })
	up.Set(resource.EndpointType, "c", eq("env", "prod"), xdstest.Endpoints("c", "127.0.0.1:11")) // the relay is not told

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: "v-elsewhere",
		ResourceLocators: []*discoverygrpc.ResourceLocator{prod}})
	resp := moved.RecvType(resource.EndpointType)
	moved.Ack(resp)
	if len(resp.GetResources()) != 1 {
		t.Fatalf("first response: %d resources, want c{env=prod}", len(resp.GetResources()))
	}
	if got := endpointPort(t, resp.GetResources()[0]); got != 11 {
		t.Fatalf("sent c{env=prod} with port %d, want the upstream's 11 (10: the relay's copy from before the subscription ended, a rollback)", got)
	}
}

// endpointPort returns the port of the first endpoint of a
// ClusterLoadAssignment, bare or wrapped in a Resource (TP2).
func endpointPort(t *testing.T, a *anypb.Any) uint32 {
	t.Helper()
	if a.GetTypeUrl() == "type.googleapis.com/envoy.service.discovery.v3.Resource" {
		w := &discoverygrpc.Resource{}
		if err := a.UnmarshalTo(w); err != nil {
			t.Fatal(err)
		}
		a = w.GetResource()
	}
	e := &endpoint.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(e); err != nil {
		t.Fatal(err)
	}
	return e.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
}

// The same when the ended subscription's selection was evicted (the oracle's
// seed 5502): another client keeps the plain name subscribed, so its
// variants stay stored; c{env=prod} subscribed again selects the stored one,
// which nothing kept current since. A client from another replica that
// brings c{env=prod} is not sent it: it was, at once, before the upstream
// answered.
func TestNoRollbackFromEvictedTP2Selection(t *testing.T) {
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "sotw"}[delta], func(t *testing.T) {
			up := xdstest.StartTP2(t)
			up.Set(resource.EndpointType, "c", nil, xdstest.Endpoints("c", "127.0.0.1:1"))
			up.Set(resource.EndpointType, "c", eq("env", "prod"), xdstest.Endpoints("c", "127.0.0.1:10"))
			r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.XDSServers[0].Protocol = "delta"
				c.Upstream.Linger = 0
				c.Cache.MaxUnreferenced = 0 // the selection of c{env=prod} is evicted once unwatched
			}))
			plain := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "plain"})
			plain.Subscribe(resource.EndpointType, "c")
			plain.Ack(plain.RecvType(resource.EndpointType))
			prod := xdstest.Locator("c", "env", "prod")
			first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
			first.SubscribeLocators(resource.EndpointType, nil, prod)
			first.Ack(first.RecvType(resource.EndpointType))
			first.Close()
			xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.EndpointType)) == 1 },
				"c{env=prod} unsubscribed upstream, c still subscribed", func() any { return up.Subscriptions(resource.EndpointType) })
			up.Set(resource.EndpointType, "c", eq("env", "prod"), xdstest.Endpoints("c", "127.0.0.1:11")) // the relay is not told

			var got uint32
			if delta {
				d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
				d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType,
					ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{prod},
					InitialResourceVersions:   map[string]string{"c": "v-elsewhere"}})
				resp := d.MustRecv()
				d.Ack(resp)
				if len(resp.GetResources()) != 1 {
					t.Fatalf("first response: %d resources, want c{env=prod}", len(resp.GetResources()))
				}
				got = endpointPort(t, resp.GetResources()[0].GetResource())
			} else {
				moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
				moved.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: "v-elsewhere",
					ResourceLocators: []*discoverygrpc.ResourceLocator{prod}})
				resp := moved.RecvType(resource.EndpointType)
				moved.Ack(resp)
				if len(resp.GetResources()) != 1 {
					t.Fatalf("first response: %d resources, want c{env=prod}", len(resp.GetResources()))
				}
				got = endpointPort(t, resp.GetResources()[0])
			}
			if got != 11 {
				t.Fatalf("sent c{env=prod} with port %d, want the upstream's 11 (10: the evicted selection stored since its subscription ended, a rollback)", got)
			}
		})
	}
}

// The same for a cluster a SotW client from another replica names (the
// oracle's seed 172663): the relay cached c1 as a member of the wildcard set,
// whose subscription ended, so the copy is unsure; the upstream changed c1
// meanwhile. A gRPC-style client that names c1 and brings its CDS version
// from elsewhere is not sent the older copy. CDS is a full-state type: the
// whole response waits for the upstream's answer, as it does while the
// upstream is away.
func TestSotWNoRollbackFromUnsureWildcardMember(t *testing.T) {
	up := xdstest.StartUpstream(t)
	old, newer := xdstest.EDSCluster("c1", "eds-old"), xdstest.EDSCluster("c1", "eds-newer")
	up.SetResources(xdstest.Resources{resource.ClusterType: {old}})
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Linger = 0
	}))
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	wild.Ack(wild.RecvType(resource.ClusterType))
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard unsubscribed", nil)
	up.SetResources(xdstest.Resources{resource.ClusterType: {newer}}) // the relay is not told

	moved := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
	moved.Resume(resource.ClusterType, "v-elsewhere", "c1")
	resp := moved.RecvType(resource.ClusterType)
	moved.Ack(resp)
	if len(resp.GetResources()) != 1 {
		t.Fatalf("first response: %d resources, want c1", len(resp.GetResources()))
	}
	if got := resp.GetResources()[0].GetValue(); !bytes.Equal(got, bodyOf(t, newer)) {
		t.Fatalf("sent c1 %x, want the upstream's %x (the relay's unsure copy, a rollback: %x)", got, bodyOf(t, newer), bodyOf(t, old))
	}
}

// No rollback from the default servers' listing of another authority's name
// that a TP2 key keeps in variant mode (the oracle's seed 580335): their
// stream and the authority's are not ordered, so a listing that comes after
// the authority's newer copy may be older. While a subscription of the
// authority covers the name they only list it, in variant mode too. Their
// listing was stored as the name's default variant, and a wildcard Envoy
// that held the authority's newer copy was sent the older one.
func TestListingInVariantModeIsNotARollback(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	def := xdstest.StartUpstream(t)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"), xdstest.EDSCluster(x, "eds-x-v1")}})
	auth := xdstest.StartTP2(t)
	auth.Set(resource.ClusterType, x, nil, xdstest.EDSCluster(x, "eds-x-v1"))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, "*")
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", x: "eds-x-v1"})
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, x)
	named.Ack(named.RecvType(resource.ClusterType))
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator(x, "env", "prod"))
	prod.Ack(prod.RecvType(resource.ClusterType))

	auth.Set(resource.ClusterType, x, nil, xdstest.EDSCluster(x, "eds-x-v2"))
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", x: "eds-x-v2"})
	// The default servers, behind, still list the older copy.
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"),
		xdstest.EDSCluster("c1", "eds-c1"), xdstest.EDSCluster(x, "eds-x-v1")}})
	for {
		resp := envoy.RecvType(resource.ClusterType)
		envoy.Ack(resp)
		got := edsNames(t, resp)
		if v := got[x]; v != "eds-x-v2" {
			t.Fatalf("sent %s at %q after eds-x-v2: the default servers' older listing", x, v)
		}
		if _, ok := got["c1"]; ok {
			return
		}
	}
}
