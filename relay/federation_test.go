package relay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

const unknownName = "xdstp://unknown.example/envoy.config.cluster.v3.Cluster/c1"

func wantNotFound(t *testing.T, errs []*discoverygrpc.ResourceError, name string) {
	t.Helper()
	if len(errs) != 1 || errs[0].GetResourceName().GetName() != name || codes.Code(errs[0].GetErrorDetail().GetCode()) != codes.NotFound {
		t.Fatalf("resource_errors = %v, want NOT_FOUND for %s", errs, name)
	}
}

// Contract: a name whose authority is not configured gets, at once, a TP3
// NOT_FOUND resource error (Delta: also a removal); the stream stays open
// and serves everything else.
func TestUnknownAuthority(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))

	s := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	s.Subscribe(resource.ClusterType, unknownName, "c1")
	resp := s.RecvType(resource.ClusterType)
	if len(resp.GetResources()) == 0 {
		// The error came first; the next full state carries c1 and the error.
		s.Ack(resp)
		resp = s.RecvType(resource.ClusterType)
	}
	wantNames(t, resp, "c1")
	wantNotFound(t, resp.GetResourceErrors(), unknownName)
	s.Ack(resp)

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(resource.ClusterType, []string{unknownName}, nil)
	dresp := d.MustRecv()
	wantNotFound(t, dresp.GetResourceErrors(), unknownName)
	wantDelta(t, dresp, nil, []string{unknownName})
	d.Ack(dresp)
	d.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	wantDelta(t, d.MustRecv(), []string{"c1"}, nil)

	for _, req := range up.Requests() {
		for _, n := range req.Names() {
			if n == unknownName {
				t.Fatal("the unknown authority's name reached the default upstream")
			}
		}
	}
}

// Names that differ only in the order of their context parameters are one
// cache entry and one upstream subscription, spelled as the first client
// spelled it (control planes match names exactly).
func TestContextParamOrderIsOneSubscription(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))
	first := "xdstp://auth.example/envoy.config.endpoint.v3.ClusterLoadAssignment/e?b=2&a=1"
	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.EndpointType, first)
	up.WaitRequest(t, 0, "the first client's subscription", func(req xdstest.Request) bool {
		return req.TypeURL() == resource.EndpointType && len(req.Names()) == 1 && req.Names()[0] == first
	})
	b := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b"})
	b.Subscribe(resource.EndpointType, "xdstp://auth.example/envoy.config.endpoint.v3.ClusterLoadAssignment/e?a=1&b=2")
	b.ExpectNoResponse(quiet) // (time for its subscription to reach the upstream, were it its own)
	for _, req := range up.Requests() {
		if req.TypeURL() == resource.EndpointType && len(req.Names()) > 1 {
			t.Fatalf("upstream asked for %v: want one name", req.Names())
		}
	}
}

// An xdstp name the default servers list in their legacy wildcard answer,
// and that a client also asks for by name (so the relay subscribes it on its
// authority's own stream), stays in the wildcard set while both streams
// deliver it: every full-state response a wildcard client gets carries it.
// (It once flipped to whichever stream wrote last and left the set: an
// Envoy-like client was told its cluster was gone, then got it back.)
func TestWildcardListsAnotherAuthoritysName(t *testing.T) {
	const x = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x"
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", x))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}} // the default servers
	}))

	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	wild.Subscribe(resource.ClusterType, "*")
	resp := wild.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1", x)
	wild.Ack(resp)

	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "grpc"})
	named.Subscribe(resource.ClusterType, x)
	nresp := named.RecvType(resource.ClusterType)
	wantNames(t, nresp, x)
	named.Ack(nresp)

	for i := range 5 {
		res := xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "eds-c1"),
			xdstest.EDSCluster(x, fmt.Sprintf("eds-x-%d", i))}}
		up.SetResources(res)
		// Both streams deliver the change; whatever the wildcard client gets
		// in between, it always has both clusters.
		for deadline := time.Now().Add(quiet); time.Now().Before(deadline); {
			ctx, cancel := context.WithTimeout(context.Background(), quiet)
			resp, err := wild.Recv(ctx)
			cancel()
			if err != nil {
				break
			}
			wantNames(t, resp, "c1", x)
			wild.Ack(resp)
		}
	}
	// Deleted, it leaves the wildcard set.
	up.SetResources(clusters("c1"))
	resp = wild.RecvType(resource.ClusterType)
	wantNames(t, resp, "c1")
}

// The default servers' listing of another authority's name is not ordered
// with its authority's stream: a listing that comes after the authority
// said the name is gone may be older than what clients hold, and is not
// sent to them. It was stored as the default servers' copy, and a client
// that held the authority's newer copy was sent the older one.
func TestListingAfterItsAuthorityDeletedItIsNotARollback(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", x))
	auth := xdstest.StartUpstream(t)
	auth.SetResources(clusters(x))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, "*", x)
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", x: "eds-" + x})
	auth.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster(x, "eds-x-v3")}})
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", x: "eds-x-v3"})
	auth.SetResources(clusters())
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0"})

	// The default servers, behind, list the version before the deletion.
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"),
		xdstest.EDSCluster("c1", "eds-c1"), xdstest.EDSCluster(x, "eds-x-v2")}})
	for {
		resp := envoy.RecvType(resource.ClusterType)
		envoy.Ack(resp)
		got := edsNames(t, resp)
		if v, ok := got[x]; ok {
			t.Fatalf("sent %s at %s, older than the eds-x-v3 the client held before its authority deleted it", x, v)
		}
		if _, ok := got["c1"]; ok {
			return
		}
	}
}

// Another authority's name subscribed by name, which the default servers
// list, keeps its authority's copy while that authority's stream is down
// (their listing may be older: TestListingKeptAsideWhileItsAuthorityIsDown),
// and follows their listing once the subscription ends before the
// authority is back: they think the relay holds it and never send it
// again. The listing was handed over only when a glob's subscription ended,
// and a wildcard client kept the authority's older copy for good (oracle
// seed 261314).
func TestListingOfANamedNameTakenOnceItsSubscriptionEnds(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", x))
	auth := xdstest.StartUpstream(t)
	auth.SetResources(clusters(x))
	r := startDeltaFederation(t, def, auth)
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, x)
	ackUntil(t, named, []string{x}, "the named client never got "+x)
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", x: "eds-" + x}) // the authority's copy
	auth.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": "auth"}) > 0
	}, "the authority's stream never ended", nil)

	// One response of the default servers changes c0 and lists x.
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2"), xdstest.EDSCluster(x, "eds-x-v1")}})
	recvListingKeptAside(t, wild, x)
	named.Close()
	// The name's subscription ends upstream (globUnsubscribed waits for any
	// of the authority's).
	globUnsubscribed(t, r)
	recvClusters(t, wild, map[string]string{"c0": "eds-c0-v2", x: "eds-x-v1"}) // the default servers' word
}

// A listing the default servers sent while the glob's subscription said its
// member was gone (not stored, see above) is the default servers' word once
// the glob ends: a Delta server, which thinks the relay holds it, is made to
// send it again, and a wildcard client gets it.
func TestListingOfADeletedMemberTakenOnceTheGlobEnds(t *testing.T) {
	m1 := "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	g := xdstest.NewGlobADS(m1)
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*")
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got the glob")
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, "*")
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", m1: "eds-" + m1})
	g.Set()
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0"})
	applied := func() float64 {
		return metricValue(t, r.Relay, "xds_relay_upstream_responses_total",
			map[string]string{"authority": "", "type_url": resource.ClusterType, "result": "ack"})
	}
	before := applied()
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"),
		xdstest.EDSCluster(m1, "eds-m1-v2")}})
	xdstest.Eventually(t, func() bool { return applied() > before }, "the default servers' listing never came", nil)

	glob.Close()
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", m1: "eds-m1-v2"})
}

// An answer of the authority's stream to a glob subscription since ended
// does not replace the copy of a member that the default servers' live
// wildcard lists: the default servers alone speak of it now, and the late
// answer may be older than what clients hold. It replaced it, and a wildcard
// client was sent the older copy.
func TestLateGlobAnswerDoesNotReplaceTheListing(t *testing.T) {
	m1, other := "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m1", "xdstp://auth/envoy.config.cluster.v3.Cluster/other"
	def := xdstest.StartUpstream(t)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"),
		xdstest.EDSCluster(m1, "eds-m1-v2")}})
	f, authAddr := startScripted(t)
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: authAddr, Protocol: "sotw"}}}}
	}))
	// Another name of the authority keeps its CDS subscription on.
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, other)
	as := f.stream(t)
	as.nextNames(resource.ClusterType, other)
	as.send(resource.ClusterType, "1", xdstest.EDSCluster(other, "eds-other"))
	ackUntil(t, named, []string{other}, "the named client never got "+other)
	applied := func() float64 {
		return metricValue(t, r.Relay, "xds_relay_upstream_responses_total",
			map[string]string{"authority": "auth", "type_url": resource.ClusterType, "result": "ack"})
	}
	before := applied()

	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*")
	as.nextNames(resource.ClusterType, other, "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*")
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, "*")
	recvClusters(t, envoy, map[string]string{"c0": "eds-c0", m1: "eds-m1-v2"})
	glob.Close()
	as.nextNames(resource.ClusterType, other)

	// The authority's answer to the glob, in flight when it ended: older.
	as.send(resource.ClusterType, "2", xdstest.EDSCluster(other, "eds-other"), xdstest.EDSCluster(m1, "eds-m1-v1"))
	xdstest.Eventually(t, func() bool { return applied() > before }, "the late answer never came", nil)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"),
		xdstest.EDSCluster("c1", "eds-c1"), xdstest.EDSCluster(m1, "eds-m1-v2")}})
	for {
		resp := envoy.RecvType(resource.ClusterType)
		envoy.Ack(resp)
		got := edsNames(t, resp)
		if got[m1] != "eds-m1-v2" {
			t.Fatalf("sent %s at %q, older than the eds-m1-v2 the default servers listed", m1, got[m1])
		}
		if _, ok := got["c1"]; ok {
			return
		}
	}
}

// Envoy percent-encodes ':' (and % ? # [ ]) in xdstp ids, and control
// planes match names exactly: the relay keys its cache canonically, but
// subscribes upstream with the spelling of the client that asked first, and
// answers every Delta client in its own spelling. SotW clients get the
// upstream's bytes, named as the upstream names them (issue 23, item 12).
func TestEnvoySpelledXdstpName(t *testing.T) {
	const (
		envoy = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
		plain = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc:8080"
	)
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, delta bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c0", envoy))
		r := xdstest.StartRelay(t, up.Addr(), mode, xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
		}))

		d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
		d.Subscribe(resource.ClusterType, []string{envoy}, nil)
		resp := d.MustRecv()
		wantDelta(t, resp, []string{envoy}, nil)
		d.Ack(resp)

		s := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
		s.Subscribe(resource.ClusterType, "c0", envoy)
		for {
			sresp := s.RecvType(resource.ClusterType)
			s.Ack(sresp)
			if got := names(t, sresp); slices.Contains(got, envoy) && slices.Contains(got, "c0") {
				break
			}
		}

		// Another client writes the same URN canonically: the same cache
		// entry, answered in its spelling.
		other := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "other"})
		other.Subscribe(resource.ClusterType, []string{plain}, nil)
		resp = other.MustRecv()
		wantDelta(t, resp, []string{plain}, nil)
		other.Ack(resp)

		// After the upstream restarts, the relay subscribes again as spelled
		// (on Delta declaring the version it holds under that spelling): the
		// next change reaches both.
		up.Restart()
		up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"), xdstest.EDSCluster(envoy, "eds-2")}})
		for c, name := range map[*xdstest.DeltaClient]string{d: envoy, other: plain} {
			resp := c.MustRecv()
			wantDelta(t, resp, []string{name}, nil)
			c.Ack(resp)
		}

		for _, req := range up.Requests() {
			if slices.Contains(req.Names(), plain) {
				t.Fatalf("the upstream was asked for %s, which no client spelled first: %v", plain, req)
			}
		}
		if !delta {
			return // a SotW upstream cannot say that a CDS name it was never asked for is gone
		}
		// The upstream's removal (in its spelling) reaches both Delta clients
		// in theirs.
		up.SetResources(clusters("c0"))
		wantDelta(t, d.MustRecv(), nil, []string{envoy})
		wantDelta(t, other.MustRecv(), nil, []string{plain})
	})
}

// The default servers may list another authority's xdstp name in their
// wildcard answer, spelled as Envoy spells it: a Delta wildcard client,
// which never spelled the name, is given it, its updates and its removal
// under the upstream's name, the one it will compare and unsubscribe —
// not under the relay's canonical key (issue 23, item 12).
func TestEnvoySpelledListedName(t *testing.T) {
	const envoy = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
	upstreamModes(t, func(t *testing.T, mode xdstest.RelayOption, _ bool) {
		up := xdstest.StartUpstream(t)
		up.SetResources(clusters("c0", envoy))
		r := xdstest.StartRelay(t, up.Addr(), mode, xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
		}))

		wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "envoy"})
		wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
		resp := wild.MustRecv()
		wantDelta(t, resp, []string{"c0", envoy}, nil)
		wild.Ack(resp)

		up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"), xdstest.EDSCluster(envoy, "eds-2")}})
		resp = wild.MustRecv()
		wantDelta(t, resp, []string{envoy}, nil)
		wild.Ack(resp)

		up.SetResources(clusters("c0"))
		wantDelta(t, wild.MustRecv(), nil, []string{envoy})
	})
}

// An xdstp name that the default servers also list in their Delta wildcard
// answer, named by a client that left, then the wildcard lapsing and coming
// back: servers that keep what they sent (xDS allows it) send it again on
// neither stream by themselves, so the relay has the default servers
// confirm it (subscribed with the wildcard, then unsubscribed), as it does
// for the wildcard's own members. It took it for deleted after
// does_not_exist_after: the wildcard client was told x was gone, and the
// cache dropped it, while both servers had it.
func TestListedNameBackWithTheWildcard(t *testing.T) {
	const x = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x"
	k := &keepingDelta{res: map[string]string{"c0": "e0", x: "ex"}}
	r := xdstest.StartRelay(t, serveADS(t, k), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}} // the default servers
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	unsubscribed := func(name string) {
		t.Helper()
		xdstest.Eventually(t, func() bool {
			return slices.ContainsFunc(k.requests(), func(req *discoverygrpc.DeltaDiscoveryRequest) bool {
				return slices.Contains(req.GetResourceNamesUnsubscribe(), name)
			})
		}, "the unsubscription of "+name, nil)
	}
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c0"}, nil)
	keeper.Ack(keeper.MustRecv())
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"*"}, nil)
	receiveAll(t, first, 2)
	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, []string{x}, nil)
	named.Ack(named.MustRecv())
	xdstest.Eventually(t, func() bool {
		return slices.ContainsFunc(r.DebugCache(relay.CacheFilter{}), func(e relay.CacheEntryInfo) bool {
			return e.Name == x && e.Authority == "auth.example"
		})
	}, "x from its authority's stream", func() any { return r.DebugCache(relay.CacheFilter{}) })
	named.Close()
	unsubscribed(x)
	first.Close()
	unsubscribed("*")

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := xdstest.DeltaHolds{}
	for deadline := time.Now().Add(5 * 200 * time.Millisecond); ; { // five times does_not_exist_after
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("the wildcard client was told %v are gone; the servers have them", removed)
		}
		held.Apply(resp)
		wild.Ack(resp)
	}
	if !held.Has("c0") || !held.Has(x) {
		t.Fatalf("the wildcard client holds %v, want c0 and x", held)
	}
	if !slices.ContainsFunc(r.DebugCache(relay.CacheFilter{}), func(e relay.CacheEntryInfo) bool { return e.Name == x }) {
		t.Fatalf("/debug/cache lost x: %+v", r.DebugCache(relay.CacheFilter{}))
	}
}

// An xdstp name the default servers start listing while its authority's
// stream already delivered it joins the wildcard set at once: a new listing
// carries no new content, so a guarded rollout neither holds it for canaries
// nor halts on a canary's NACK. It was rolled out like an update, and once a
// canary NACKed, the halt kept it out of the wildcard set for good: wildcard
// clients never got it while both servers had it.
func TestListingIsNotRolledOut(t *testing.T) {
	const x = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x"
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", x))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}} // the default servers
		c.Rollout = &config.Rollout{CanaryFraction: 1, Hold: 30 * time.Second, MaxNACKRatio: 0}
	}))
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "grpc"})
	named.Subscribe(resource.ClusterType, x)
	resp := named.RecvType(resource.ClusterType)
	wantNames(t, resp, x)
	named.Ack(resp)

	nacker := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "nacker"})
	nacker.Subscribe(resource.ClusterType, "*")
	nacker.Nack(nacker.RecvType(resource.ClusterType), "no")

	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	wild.Subscribe(resource.ClusterType, "*")
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		resp, err := wild.Recv(ctx)
		cancel()
		if err != nil {
			t.Fatalf("the wildcard client never got %s, which the default servers list", x)
		}
		wild.Ack(resp)
		if slices.Equal(names(t, resp), []string{"c1", x}) {
			break
		}
	}
}

// A SotW Envoy from elsewhere (it brings a version) subscribed to the
// wildcard and a glob collection whose member x the default servers also
// list, moved to its node's own scope by a do_not_cache cluster of the
// wildcard set, gets the whole state once the own scope's streams answer.
// The own View was seeded with x from the shared one, so the own stream of
// x's authority told its Delta server the relay held x; the server rightly
// sent nothing, the glob never counted as answered, and the client's
// response was held for good.
func TestMovedToOwnScopeListedMemberNotSeeded(t *testing.T) {
	const (
		personal = "personal"
		x        = globAuth + "g/x"
	)
	release := make(chan struct{})
	def := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		<-release // the shared scope's wildcard waits until the glob's member is cached
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range []string{"c0", x, personal} {
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return nil, err
			}
			if n == personal {
				if a, err = anypb.New(&discoverygrpc.Resource{Name: n, Resource: a,
					CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}}); err != nil {
					return nil, err
				}
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}}
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(x)))
	r := xdstest.StartRelay(t, startFakeCDS(t, def), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Resume(resource.ClusterType, "v-elsewhere", "*", globG)
	xdstest.Eventually(t, func() bool { return cachedIn(r, "", x) }, "x from its glob", nil)
	close(release)
	resp := envoy.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0", personal, x)
}

// A client moved to its node's own scope by a do_not_cache resource it
// named in Envoy's spelling is subscribed there as it spelled it, as its
// group scope was: the own scope asked the upstream for the canonical name,
// which a control plane matching names exactly does not hold, and the
// client never got the resource (issue 23, item 12).
func TestEnvoySpelledNameMovedToOwnScope(t *testing.T) {
	const (
		envoy = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
		plain = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc:8080"
	)
	f := &fakeCDS{answerNode: func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		if !slices.Contains(names, envoy) {
			return resp, nil // it holds the name only as Envoy spells it
		}
		inner, err := anypb.New(xdstest.EDSCluster(envoy, "eds-"+node.GetId()))
		if err != nil {
			return nil, err
		}
		a, err := anypb.New(&discoverygrpc.Resource{Name: envoy, Resource: inner,
			CacheControl: &discoverygrpc.Resource_CacheControl{DoNotCache: true}})
		resp.Resources = append(resp.Resources, a)
		return resp, err
	}}
	r := xdstest.StartRelay(t, startFakeCDS(t, f), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, envoy)
	recvClusters(t, a, map[string]string{envoy: "eds-a"})
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, names := range f.asked {
		if slices.Contains(names, plain) {
			t.Fatalf("the upstream was asked for %s, which no client spelled: %v", plain, f.asked)
		}
	}
}

// A name of another authority that the default servers list stays in the
// wildcard set when its own authority's stream delivers its default variant
// to a TP2 subscription (the name in variant mode): the variant took the
// listed copy's place unlisted, and a wildcard Envoy was sent a CDS without
// it while both servers had it (issue 23, item 5).
func TestListedNameKeepsItsListingAsADefaultVariant(t *testing.T) {
	const x = globAuth + "x"
	def := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		if len(names) > 0 && !slices.Contains(names, "*") {
			return resp, nil
		}
		for _, n := range []string{"c0", x} { // the wildcard lists x too
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return nil, err
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}}
	auth := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		if !slices.ContainsFunc(names, func(n string) bool { return n == x+"{env=prod}" }) {
			return resp, nil
		}
		inner, err := anypb.New(xdstest.EDSCluster(x, "eds-"+x)) // the default variant: it matches env=prod
		if err != nil {
			return nil, err
		}
		a, err := anypb.New(&discoverygrpc.Resource{ResourceName: &discoverygrpc.ResourceName{Name: x}, Resource: inner})
		resp.Resources = append(resp.Resources, a)
		return resp, err
	}}
	r := xdstest.StartRelay(t, startFakeCDS(t, def), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: startFakeCDS(t, auth), Protocol: "sotw"}}}}
	}))
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy"})
	envoy.Subscribe(resource.ClusterType, "*")
	resp := envoy.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0", x)
	envoy.Ack(resp)

	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator(x, "env", "prod"))
	if got := prod.RecvType(resource.ClusterType); len(got.GetResources()) != 1 {
		t.Fatalf("the prod client got %d resources, want %s", len(got.GetResources()), x)
	}
	// A short wait suffices: a CDS change for the Envoy leaves with the View
	// that answered the prod client.
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	for {
		resp, err := envoy.Recv(ctx)
		if err != nil {
			return
		}
		if resp.GetTypeUrl() == resource.ClusterType && !slices.Contains(names(t, resp), x) {
			t.Fatalf("the wildcard Envoy was sent CDS %v: %s dropped while both servers have it", names(t, resp), x)
		}
	}
}

// A TP3 error names the resource as the client spelled it: a SotW client
// that asked for an Envoy-spelled name of an authority that is not
// configured gets its NOT_FOUND under that name. Under the relay's
// canonical key (…/svc:8080) the client matches nothing, and a CDS
// response without its cluster deletes it — also when the error is the
// relay's own UNAVAILABLE, which should keep it (the oracle's seed 173339,
// a REST poller).
func TestEnvoySpelledNameErrorAsSpelled(t *testing.T) {
	const envoy = "xdstp://unknown.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	s := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
	s.Subscribe(resource.ClusterType, envoy, "c1")
	for {
		resp := s.RecvType(resource.ClusterType)
		s.Ack(resp)
		if len(resp.GetResources()) > 0 {
			wantNames(t, resp, "c1")
			wantNotFound(t, resp.GetResourceErrors(), envoy)
			return
		}
	}
}

// A glob member its authority's stream delivered, which the default servers
// also list, stays confirmed when their wildcard's subscription ends while
// the glob's goes on: its own stream still speaks for it. It was marked
// unsure, nothing confirmed it again, and a SotW client that brought config
// from elsewhere and subscribed the glob was held back for good.
func TestListedMemberStaysSureWhileItsGlobIsSubscribed(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got its member")
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	ackUntil(t, wild, []string{"c0", m1}, "the wildcard client never got the listed member")
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard unsubscribed", nil)

	moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-elsewhere", globG)
	ackUntil(t, moved, []string{m1}, "the client from elsewhere was never sent the glob's member")
}
