package relay_test

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// Glob collections: clients subscribed to ".../blue/*" get every member and
// nothing else, however many share it the relay holds one upstream
// subscription, and a SotW and a Delta client see the same members.
func TestGlobCollections(t *testing.T) {
	const p = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/"
	clusters := []string{p + "blue/a", p + "blue/b", p + "green/c"}
	// The upstream expands globs (go-control-plane does not).
	up := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, c := range clusters {
			cu, err := keying.ParseURN(c)
			if err != nil {
				return nil, err
			}
			if slices.ContainsFunc(names, func(n string) bool {
				g, err := keying.ParseURL(n)
				return n == c || (err == nil && g.IsGlob() && g.Matches(cu))
			}) {
				a, err := anypb.New(xdstest.EDSCluster(c, "eds"))
				if err != nil {
					return nil, err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		return resp, nil
	}}
	addr := startFakeCDS(t, up)

	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))
	for i := range 3 {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: string(rune('a' + i))})
		c.Subscribe(resource.ClusterType, p+"blue/*")
		resp := c.RecvType(resource.ClusterType)
		wantNames(t, resp, p+"blue/a", p+"blue/b")
		c.Ack(resp)
	}
	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(resource.ClusterType, []string{p + "blue/*"}, nil)
	wantDelta(t, d.MustRecv(), []string{p + "blue/a", p + "blue/b"}, nil)

	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.asked) != 1 || !slices.Equal(up.asked[0], []string{p + "blue/*"}) {
		t.Fatalf("upstream asked %v, want one glob subscription", up.asked)
	}
}

// globAuth is the authority of the glob tests, g its collection.
const (
	globAuth = "xdstp://auth/envoy.config.cluster.v3.Cluster/"
	globG    = globAuth + "g/*"
)

// startGlobRelay starts a relay whose default servers serve c0 and whose
// authority "auth" is g, served over protocol ("sotw" or "delta").
func startGlobRelay(t *testing.T, g *xdstest.GlobADS, protocol string) (*xdstest.Relay, *xdstest.Upstream) {
	t.Helper()
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0"))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: protocol}}}}
	}))
	return r, auth
}

// A glob member the upstream deletes (a SotW full state without it, or a
// Delta removal) is deleted for every client of the glob: a SotW client gets
// the new set, a Delta client the removal, and later changes keep coming.
func TestGlobMemberDeletedUpstream(t *testing.T) {
	m1, m2, m3 := globAuth+"g/m1", globAuth+"g/m2", globAuth+"g/m3"
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) {
			g := xdstest.NewGlobADS(m1, m2)
			r, _ := startGlobRelay(t, g, protocol)
			sotw := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
			sotw.Subscribe(resource.ClusterType, globG)
			resp := sotw.RecvType(resource.ClusterType)
			wantNames(t, resp, m1, m2)
			sotw.Ack(resp)
			delta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
			delta.Subscribe(resource.ClusterType, []string{globG}, nil)
			dr := delta.MustRecv()
			wantDelta(t, dr, []string{m1, m2}, nil)
			delta.Ack(dr)

			g.Set(m1)
			dr = delta.MustRecv()
			wantDelta(t, dr, nil, []string{m2})
			delta.Ack(dr)
			resp = sotw.RecvType(resource.ClusterType)
			wantNames(t, resp, m1)
			sotw.Ack(resp)

			g.Set(m1, m3)
			wantNames(t, sotw.RecvType(resource.ClusterType), m1, m3)
			wantDelta(t, delta.MustRecv(), []string{m3}, nil)
		})
	}
}

// startOutage makes the glob's authority leave the relay without its set —
// "down": its server stopped; "slow": connected, answering nothing — and
// returns what ends the outage.
func startOutage(g *xdstest.GlobADS, auth *xdstest.Upstream, outage string) (end func()) {
	if outage == "down" {
		auth.Stop()
		return auth.Restart
	}
	g.Pause(true)
	return func() { g.Pause(false) }
}

// A SotW client that comes from another replica subscribed to a glob
// collection, while the glob's authority is down or slow, waits: it may hold
// members the relay does not know of yet. Once the authority answers the
// glob, it gets the whole set.
func TestGlobSotWClientFromElsewhere(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	for _, outage := range []string{"down", "slow"} {
		t.Run(outage, func(t *testing.T) {
			g := xdstest.NewGlobADS(m1, m2)
			r, auth := startGlobRelay(t, g, "delta")
			end := startOutage(g, auth, outage)
			// Per-type CDS: on ADS, make before break holds a client from
			// elsewhere anyway until it has LDS.
			c := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
			c.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v-elsewhere",
				ResourceNames: []string{"c0", globG}})
			c.ExpectNoResponse(quiet)

			end()
			wantNames(t, c.RecvType(resource.ClusterType), "c0", m1, m2)
		})
	}
}

// A Delta client that comes from another replica with glob members
// (initial_resource_versions) is not told they are gone while the glob's
// authority is down or slow; once the authority answers the glob, it gets
// what changed and the removal of the member the set no longer has.
func TestGlobDeltaClientFromElsewhere(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	for _, outage := range []string{"down", "slow"} {
		t.Run(outage, func(t *testing.T) {
			g := xdstest.NewGlobADS(m1)
			r, auth := startGlobRelay(t, g, "delta")
			end := startOutage(g, auth, outage)
			d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
			d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{globG},
				InitialResourceVersions: map[string]string{m1: "v-elsewhere", m2: "v-elsewhere"}})
			if resp, ok := d.TryRecv(quiet); ok {
				wantDelta(t, resp, nil, nil)
			}

			end()
			held := xdstest.DeltaHolds{m1: "v-elsewhere", m2: "v-elsewhere"}
			for held.Has(m2) || held[m1] == "v-elsewhere" {
				resp := d.MustRecv()
				held.Apply(resp)
				d.Ack(resp)
			}
		})
	}
}

// A client that comes from another replica with members of a glob
// collection the upstream has emptied is told they are gone: a Delta server
// names the empty glob in removed_resources (xDS TP1), its word on the set.
func TestGlobClientFromElsewhereEmptyGlob(t *testing.T) {
	m1 := globAuth + "g/m1"
	t.Run("delta", func(t *testing.T) {
		r, _ := startGlobRelay(t, xdstest.NewGlobADS(), "delta")
		d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
		d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{globG},
			InitialResourceVersions: map[string]string{m1: "v-elsewhere"}})
		held := xdstest.DeltaHolds{m1: "v-elsewhere"}
		for held.Has(m1) {
			resp := d.MustRecv()
			held.Apply(resp)
			d.Ack(resp)
		}
	})
	t.Run("sotw", func(t *testing.T) {
		r, _ := startGlobRelay(t, xdstest.NewGlobADS(), "delta")
		c := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
		c.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v-elsewhere",
			ResourceNames: []string{"c0", globG}})
		wantNames(t, c.RecvType(resource.ClusterType), "c0")
	})
	// Subscribed to the glob alone, the SotW client is answered the empty
	// set: the upstream's word, not "nothing known yet".
	for name, version := range map[string]string{"elsewhere": "v-elsewhere", "new": ""} {
		t.Run("sotw-glob-only-"+name, func(t *testing.T) {
			r, _ := startGlobRelay(t, xdstest.NewGlobADS(), "delta")
			c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
			c.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: version,
				ResourceNames: []string{globG}})
			wantNames(t, c.RecvType(resource.ClusterType))
		})
	}
}

// A glob of an authority that is not configured has no members (TP3
// NOT_FOUND): a client from elsewhere subscribed to it is answered, not held.
func TestGlobOfUnknownAuthorityFromElsewhere(t *testing.T) {
	const glob = "xdstp://nowhere/envoy.config.cluster.v3.Cluster/g/*"
	r, _ := startGlobRelay(t, xdstest.NewGlobADS(), "delta")
	c := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
	c.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v-elsewhere",
		ResourceNames: []string{"c0", glob}})
	resp := c.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0")
	wantNotFound(t, resp.GetResourceErrors(), glob)
}

// Once the glob's authority has gone away, the set it answered is
// unconfirmed (View.Stale): a SotW client from elsewhere waits for the
// authority again rather than take the relay's older set for the truth.
func TestGlobSotWClientFromElsewhereStale(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	g := xdstest.NewGlobADS(m1, m2)
	r, auth := startGlobRelay(t, g, "delta")
	first := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "first"}, resource.ClusterType)
	first.Subscribe(resource.ClusterType, globG)
	wantNames(t, first.RecvType(resource.ClusterType), m1, m2)
	auth.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": "auth"}) > 0
	}, "the authority's stream gone", nil)

	c := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
	c.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v-elsewhere",
		ResourceNames: []string{"c0", globG}})
	c.ExpectNoResponse(quiet)
	g.Set(m1, m2, globAuth+"g/m3")
	auth.Restart()
	wantNames(t, c.RecvType(resource.ClusterType), "c0", m1, m2, globAuth+"g/m3")
}

// A glob member deleted upstream while nothing subscribed the glob (its
// unsubscription gone out, the member left cached) is gone for the glob's
// next subscriber once the upstream speaks — a SotW full state without it,
// on the same stream or on a new one, is the upstream's word, though the
// upstream client forgot the member with the unsubscription. A Delta server
// forgets the members with the glob and, the glob subscribed again on the
// same stream, sends what it has and says nothing of the deleted member:
// the cached member is unsure, and the relay asks for the server's word on
// a new stream. The client was served the stale member for good.
func TestGlobMemberDeletedWhileUnsubscribed(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		for _, stream := range []string{"same", "new"} {
			t.Run(protocol+"-"+stream, func(t *testing.T) { testGlobMemberDeletedWhileUnsubscribed(t, protocol, stream) })
		}
	}
}

func testGlobMemberDeletedWhileUnsubscribed(t *testing.T, protocol, stream string) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	g := xdstest.NewGlobADS(m1, m2)
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0"))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: protocol}}}}
	}))
	first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, globG)
	resp := first.RecvType(resource.ClusterType)
	wantNames(t, resp, m1, m2)
	first.Ack(resp)
	first.Close()
	globUnsubscribed(t, r)
	if stream == "new" {
		auth.Stop()
		g.Set(m1)
		auth.Restart()
	} else {
		g.Set(m1)
	}

	again := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "again"})
	again.Subscribe(resource.ClusterType, globG)
	ackUntil(t, again, []string{m1}, "the glob's new subscriber still holds "+m2+", which the upstream deleted")
}

// A glob member the relay holds unsure (its glob unsubscribed, then
// subscribed again with no word on it) stays unsure while the relay's new
// Delta stream (the does-not-exist wait's resync) tells the server it holds
// it: the server has not answered yet, and may remove it. A Delta client
// that brought another version from elsewhere is held until the server's
// answer removes it. The new stream's first request once confirmed it the
// moment it was built, and the relay's older member went to the client.
func TestGlobMemberDeclaredStaysUnsureUntilAnswered(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	g := xdstest.NewGlobADS(m1, m2)
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0"))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 3 * time.Second
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	first := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, globG)
	resp := first.RecvType(resource.ClusterType)
	wantNames(t, resp, m1, m2)
	first.Ack(resp)
	first.Close()
	globUnsubscribed(t, r)
	g.Set(m1)
	g.Pause(true) // every stream's answer waits for the test

	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{globG},
		InitialResourceVersions: map[string]string{m1: "v-elsewhere", m2: "v-elsewhere"}})
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_resyncs_total", map[string]string{"authority": "auth", "reason": "does_not_exist"}) > 0
	}, "a new stream asks the server", nil)
	// quiet is far shorter than the new stream's does-not-exist wait, and
	// the relay once sent the member at once.
	held := xdstest.DeltaHolds{m1: "v-elsewhere", m2: "v-elsewhere"}
	for resp, ok := moved.TryRecv(quiet); ok; resp, ok = moved.TryRecv(quiet) {
		if slices.Contains(sentNames(resp), m2) {
			t.Fatalf("the relay's older %s sent to a client holding another before the new stream was answered (sent %v)", m2, sentNames(resp))
		}
		held.Apply(resp)
		moved.Ack(resp)
	}

	g.Pause(false)
	for held.Has(m2) {
		resp := moved.MustRecv()
		if slices.Contains(sentNames(resp), m2) {
			t.Fatalf("the relay's older %s sent, though the upstream deleted it", m2)
		}
		held.Apply(resp)
		moved.Ack(resp)
	}
}

// sentNames returns the names of the resources a Delta response sends.
func sentNames(resp *discoverygrpc.DeltaDiscoveryResponse) []string {
	var out []string
	for _, r := range resp.GetResources() {
		out = append(out, r.GetName())
	}
	return out
}

// A glob member the relay cached only from the default servers' listing
// (their wildcard answer, whose subscription has since ended) is gone once
// its own authority answers the glob without it: the authority's word on
// its own name removes whatever the cache holds of it. The cached copy,
// from the default servers, stayed for good, and the glob's subscriber was
// served the deleted member.
func TestGlobMemberListedByTheDefaultServersDeletedByItsAuthority(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) { testListedMemberDeletedByItsAuthority(t, protocol) })
	}
}

// testListedMemberDeletedByItsAuthority: with a Delta authority, the stream
// that subscribes the glob must be told of the listed copy (its first
// request declares it), or its server never says the member is gone.
func testListedMemberDeletedByItsAuthority(t *testing.T, protocol string) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m2))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: protocol}}}}
	}))
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	resp := wild.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0", m2)
	wild.Ack(resp)
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard unsubscribed", nil)

	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber still holds "+m2+", which its authority does not have")
}

// A glob member loaded from the warm-restart file is a member of its glob
// collection again: deleted upstream while the relay was down, it is gone
// once the upstream answers the glob, for a Delta client that brought it.
// The file kept no glob, so the member was nobody's: the upstream's answer
// did not remove it, and the client kept it for good.
func TestWarmRestartGlobMember(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	g := xdstest.NewGlobADS(m1, m2)
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0"))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "sotw"}}}}
	})
	first := xdstest.StartRelay(t, def.Addr(), opt)
	d := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(resource.ClusterType, []string{globG}, nil)
	resp := d.MustRecv()
	wantDelta(t, resp, []string{m1, m2}, nil)
	held := map[string]string{}
	for _, r := range resp.GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	d.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	g.Set(m1)

	second := xdstest.StartRelay(t, def.Addr(), opt)
	d = xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "delta"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{globG},
		InitialResourceVersions: held})
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, ok := d.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the client was never told %s is gone", m2)
		}
		d.Ack(resp)
		if _, removed := deltaNames(resp); slices.Contains(removed, m2) {
			break
		}
	}
}

// A glob member its authority's stream delivered, which the default servers
// also list, follows the default servers' listing once the glob's
// subscription has ended: they are the only ones still speaking of it. It
// kept the content the glob's stream last sent, and a wildcard client never
// got the member's change.
func TestListedMemberFollowsTheListingOnceTheGlobEnds(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "sotw"}}}}
	}))
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	resp := glob.RecvType(resource.ClusterType)
	wantNames(t, resp, m1)
	glob.Ack(resp)
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-" + m1})
	glob.Close()
	globUnsubscribed(t, r)

	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"), xdstest.EDSCluster(m1, "eds-m1-v2")}})
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-m1-v2"})
}

// ackUntil reads and ACKs c's responses until one holds exactly want, and
// fails with failure if none does within 20 s.
func ackUntil(t *testing.T, c *xdstest.ADSClient, want []string, failure string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		resp, err := c.Recv(ctx)
		cancel()
		if err != nil {
			t.Fatal(failure)
		}
		c.Ack(resp)
		if slices.Equal(names(t, resp), want) {
			return
		}
	}
}

// A glob member its authority's stream delivered, which the default servers'
// wildcard also lists, is declared in the initial_resource_versions of a new
// Delta stream of the default servers: deleted while the relay was away from
// them, after the glob's subscription ended, it is gone once they say so.
// The default stream declared only its own names, its server never said the
// member was gone, and a wildcard client kept it for good.
func TestListedMemberDeclaredToTheDefaultServers(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1, m2))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1, m2)))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, "*", globG)
	ackUntil(t, glob, []string{"c0", m1, m2}, "the glob's subscriber never got the wildcard and the glob")
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := xdstest.DeltaHolds{}
	for !held.Has(m2) {
		resp := wild.MustRecv()
		held.Apply(resp)
		wild.Ack(resp)
	}
	glob.Close()
	globUnsubscribed(t, r)

	def.Stop()
	def.SetResources(clusters("c0", m1))
	def.Restart()
	for deadline := time.Now().Add(20 * time.Second); held.Has(m2); {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client still holds %s, which the default servers no longer list", m2)
		}
		held.Apply(resp)
		wild.Ack(resp)
	}
}

// A glob member the default servers stop listing while its glob's
// subscription still covers it stays cached, unlisted, once the glob ends; a
// Delta wildcard client that brings it from elsewhere is told it is gone —
// the default servers' word on what the wildcard covers, as a client
// connected at the time was told. It was skipped as cached, and kept for good.
func TestUnlistedMemberRemovedForWildcardFromElsewhere(t *testing.T) {
	m1, m2 := globAuth+"g/m1", globAuth+"g/m2"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1, m2))
	g := xdstest.NewGlobADS(m1, m2)
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1, m2}, "the glob's subscriber never got the glob")
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := xdstest.DeltaHolds{}
	for !held.Has("c0") || !held.Has(m1) || !held.Has(m2) {
		resp := wild.MustRecv()
		held.Apply(resp)
		wild.Ack(resp)
	}
	brought := maps.Clone(held)
	def.SetResources(clusters("c0", m1))
	for held.Has(m2) {
		resp := wild.MustRecv()
		held.Apply(resp)
		wild.Ack(resp)
	}
	glob.Close()
	globUnsubscribed(t, r)
	g.Set(m1) // deleted by its authority too, while nothing subscribes it

	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: brought})
	for deadline := time.Now().Add(20 * time.Second); brought.Has(m2); {
		resp, ok := moved.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the moved wildcard client still holds %s, which the default servers no longer list", m2)
		}
		brought.Apply(resp)
		moved.Ack(resp)
	}
}

// A glob member the default servers list is theirs once its glob's
// subscription has ended: their change of it replaces the authority's copy,
// and a Delta wildcard client that brings the older copy from elsewhere is
// sent it — the default servers' live stream confirms it, whatever became of
// the authority's stream since. It was judged by its name's authority, whose
// stream, gone while nothing subscribed it, stayed unconfirmed for good, and
// the client kept the older copy.
func TestListedMemberFromTheDefaultServersNotHeldForItsAuthority(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got the glob")
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := xdstest.DeltaHolds{}
	for !held.Has("c0") || !held.Has(m1) {
		resp := wild.MustRecv()
		held.Apply(resp)
		wild.Ack(resp)
	}
	brought := maps.Clone(held)
	glob.Close()
	globUnsubscribed(t, r)
	auth.Stop() // the authority's copy is unconfirmed from now on
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": "auth"}) > 0
	}, "the authority's stream never ended", nil)

	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0"), xdstest.EDSCluster(m1, "eds-m1-v2")}})
	for held[m1] == brought[m1] {
		resp := wild.MustRecv()
		held.Apply(resp)
		wild.Ack(resp)
	}
	moved := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: brought})
	for deadline := time.Now().Add(20 * time.Second); brought[m1] != held[m1]; {
		resp, ok := moved.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the moved wildcard client still holds the older %s, which the default servers changed", m1)
		}
		brought.Apply(resp)
		moved.Ack(resp)
	}
}

// While its authority's stream is down and its glob is still subscribed, a
// member's listing by the default servers does not replace the authority's
// copy: the two streams are not ordered, and a listing on its way when the
// authority's stream ended may be older than what the authority sent. It is
// kept aside, and replaces the authority's copy once the glob ends before
// the authority is back: the default servers, which think the relay holds
// it, never send it again. It replaced the authority's copy at once, and a
// wildcard client was rolled back (oracle seed 253808).
func TestListingKeptAsideWhileItsAuthorityIsDown(t *testing.T) {
	m1 := globAuth + "g/m1"
	_, _, _, r, glob, wild := asideWhileAuthorityDown(t)
	glob.Close()
	globUnsubscribed(t, r)
	recvClusters(t, wild, map[string]string{"c0": "eds-c0-v2", m1: "eds-m1-v1"}) // the default servers' word
}

// A glob member cached from the default servers' listing keeps that copy
// while its authority's answer to the glob is awaited: their next listing
// is kept aside, as the authority's answer, on another stream, may be older
// (it was built before their change) and would roll back clients that got
// the listing. The listing was served, and the authority's late answer then
// replaced it (oracle seed 253808).
func TestListingKeptAsideWhileTheGlobIsUnanswered(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	g := xdstest.NewGlobADS(m1)
	g.Pause(true) // the authority's answer is late
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := startDeltaFederation(t, def, auth)
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-" + m1}) // the default servers' copy
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "auth", "op": "subscribe"}) > 0
	}, "the glob was never subscribed upstream", nil)

	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2"), xdstest.EDSCluster(m1, "eds-m1-v1")}})
	for {
		resp := wild.RecvType(resource.ClusterType)
		wild.Ack(resp)
		got := edsNames(t, resp)
		if got["c0"] != "eds-c0-v2" {
			continue
		}
		if got[m1] != "eds-"+m1 {
			t.Fatalf("the wildcard client was sent the default servers' listing of %s while its authority's answer to the glob was awaited: %v", m1, got)
		}
		break
	}
	g.Pause(false)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got the authority's answer")
}

// Another authority's name the default servers listed, left unsure when
// the wildcard's subscription ended while their stream was down, is asked of
// the default servers once the wildcard is subscribed again on their new
// stream (which declared only a named cluster): they alone cover it, and
// their new stream knows nothing of it. Deleted meanwhile, it is gone for a
// wildcard client once they say so. The relay asked the name's authority,
// whose subscriptions do not cover it, took that for silence, and the
// wildcard client kept it for good.
func TestListedMemberAskedOfTheDefaultServers(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	r := xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, "c0")
	ackUntil(t, named, []string{"c0"}, "the named client never got c0")
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	ackUntil(t, wild, []string{"c0", m1}, "the wildcard client never got the default servers' listing")

	def.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": ""}) > 0
	}, "the default servers' stream never ended", nil)
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard unsubscribed", nil)
	def.SetResources(clusters("c0", "c1")) // m1 deleted while the relay was away
	def.Restart()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_connected", map[string]string{"scope": "shared", "server": def.Addr(), "authority": ""}) == 1
	}, "the default servers' stream never came back", nil)

	back := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "back"})
	back.Subscribe(resource.ClusterType, "*")
	ackUntil(t, back, []string{"c0", "c1"}, "the wildcard client still holds "+m1+", which the default servers no longer list")
}

// globUnsubscribed waits until r has unsubscribed something of the "auth"
// authority upstream: its glob, once the glob's last subscriber left.
func globUnsubscribed(t *testing.T, r *xdstest.Relay) {
	t.Helper()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "auth", "op": "unsubscribe"}) > 0
	}, "the glob unsubscribed", nil)
}

// startDeltaFederation starts a relay whose default servers are def and
// whose authority "auth" is served by auth, both over Delta, with no linger:
// a subscription ends upstream as soon as its last watcher goes.
func startDeltaFederation(t *testing.T, def, auth *xdstest.Upstream) *xdstest.Relay {
	t.Helper()
	return xdstest.StartRelay(t, def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
}

// asideWhileAuthorityDown brings a relay to where the default servers'
// listing of m1 (eds-m1-v1) is kept aside: the glob is subscribed, the
// authority's stream is down, and a wildcard client holds the authority's
// copy.
func asideWhileAuthorityDown(t *testing.T) (def, auth *xdstest.Upstream, g *xdstest.GlobADS, r *xdstest.Relay, glob, wild *xdstest.ADSClient) {
	t.Helper()
	m1 := globAuth + "g/m1"
	def = xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	g = xdstest.NewGlobADS(m1)
	auth = xdstest.StartUpstream(t, xdstest.WithADS(g))
	r = startDeltaFederation(t, def, auth)
	glob = xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got the glob")
	wild = xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-" + m1}) // the authority's copy
	auth.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": "auth"}) > 0
	}, "the authority's stream never ended", nil)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2"), xdstest.EDSCluster(m1, "eds-m1-v1")}})
	recvListingKeptAside(t, wild, m1)
	return def, auth, g, r, glob, wild
}

// recvListingKeptAside receives CDS responses on wild until the default
// servers' response that changes c0 (eds-c0-v2) and lists name, failing if
// any carries their listing of name (eds-x-v1 or eds-m1-v1) instead of the
// authority's copy (eds-<name>): the wildcard client sees both in one View,
// so c0's change is when to look.
func recvListingKeptAside(t *testing.T, wild *xdstest.ADSClient, name string) {
	t.Helper()
	for {
		resp := wild.RecvType(resource.ClusterType)
		wild.Ack(resp)
		got := edsNames(t, resp)
		c0Changed := got["c0"] == "eds-c0-v2"
		if got[name] != "eds-"+name && (c0Changed || got[name] != "") {
			t.Fatalf("the wildcard client was sent the default servers' listing of %s over the authority's copy: %v", name, got)
		}
		if c0Changed {
			return
		}
	}
}

// recvClustersUntil receives CDS responses on c until one is want, for up to
// 20 s; it fails with the last state seen.
func recvClustersUntil(t *testing.T, c *xdstest.ADSClient, want map[string]string) {
	t.Helper()
	var last map[string]string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		resp, err := c.Recv(ctx)
		cancel()
		if err != nil {
			break
		}
		c.Ack(resp)
		if resp.GetTypeUrl() != resource.ClusterType {
			continue
		}
		if last = edsNames(t, resp); maps.Equal(last, want) {
			return
		}
	}
	t.Fatalf("CDS state %v, want %v", last, want)
}

// The listing kept aside is dropped when the
// default servers' wildcard ends; the Delta default servers, which think
// the relay holds m1, do not send it again when the wildcard comes back.
// Once the glob ends, a wildcard client must get the default servers'
// listing (eds-m1-v1), not the authority's older copy as theirs.
func TestAsideListingSurvivesTheWildcardEndingAndComingBack(t *testing.T) {
	m1 := globAuth + "g/m1"
	_, _, _, r, glob, wild := asideWhileAuthorityDown(t)
	wild.Close()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "", "op": "unsubscribe"}) > 0
	}, "the wildcard was never unsubscribed upstream", nil)
	wild2 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild2"})
	wild2.Subscribe(resource.ClusterType, "*")
	glob.Close()
	globUnsubscribed(t, r)
	recvClustersUntil(t, wild2, map[string]string{"c0": "eds-c0-v2", m1: "eds-m1-v1"})
}

// The listing kept aside while the authority
// is down; the authority comes back having deleted m1, and the glob ends
// after. The default servers still list m1 (eds-m1-v1) and, over Delta,
// think the relay holds it: a wildcard client must get it once no
// subscription of the authority covers m1.
func TestAsideListingAfterTheAuthorityDeletedIt(t *testing.T) {
	m1 := globAuth + "g/m1"
	_, auth, g, r, glob, wild := asideWhileAuthorityDown(t)
	g.Set()
	auth.Restart()
	recvClustersUntil(t, wild, map[string]string{"c0": "eds-c0-v2"}) // the authority's word: gone
	glob.Close()
	globUnsubscribed(t, r)
	recvClustersUntil(t, wild, map[string]string{"c0": "eds-c0-v2", m1: "eds-m1-v1"})
}

// The listing kept aside, then the default
// servers delete m1 while the authority is still down: m1 leaves the
// wildcard client, and the glob's end does not bring back the listing
// they deleted.
func TestAsideListingDeletedByTheDefaultServersStaysGone(t *testing.T) {
	m1 := globAuth + "g/m1"
	def, _, _, r, glob, wild := asideWhileAuthorityDown(t)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2")}})
	recvClustersUntil(t, wild, map[string]string{"c0": "eds-c0-v2"})
	glob.Close()
	globUnsubscribed(t, r)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v3")}})
	for {
		resp := wild.RecvType(resource.ClusterType)
		wild.Ack(resp)
		got := edsNames(t, resp)
		if _, ok := got[m1]; ok {
			t.Fatalf("%s, deleted by the default servers, came back: %v", m1, got)
		}
		if got["c0"] == "eds-c0-v3" {
			return
		}
	}
}

// The listing kept aside lives in memory
// only. The relay restarts from its warm-restart file while the authority
// is still down; once the glob ends, a wildcard client must get the default
// servers' listing (eds-m1-v1), which they think the relay holds.
func TestAsideListingAcrossAWarmRestart(t *testing.T) {
	m1 := globAuth + "g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m1))
	auth := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.Linger = 0
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	})
	first := xdstest.StartRelay(t, def.Addr(), opt)
	glob := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m1}, "the glob's subscriber never got the glob")
	wild := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m1: "eds-" + m1})
	auth.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, first.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"authority": "auth"}) > 0
	}, "the authority's stream never ended", nil)
	def.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", "eds-c0-v2"), xdstest.EDSCluster(m1, "eds-m1-v1")}})
	recvClusters(t, wild, map[string]string{"c0": "eds-c0-v2", m1: "eds-" + m1}) // kept aside
	glob.Close()
	wild.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	second := xdstest.StartRelay(t, def.Addr(), opt)
	glob = xdstest.DialADS(t, second.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	wild = xdstest.DialADS(t, second.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	xdstest.Eventually(t, func() bool {
		return metricValue(t, second.Relay, "xds_relay_upstream_requests_total", map[string]string{"authority": "auth", "op": "subscribe"}) > 0
	}, "the glob was never subscribed upstream", nil)
	glob.Close()
	globUnsubscribed(t, second)
	recvClustersUntil(t, wild, map[string]string{"c0": "eds-c0-v2", m1: "eds-m1-v1"})
}

// A new member m1 of a glob its authority answered long ago is listed by
// the default servers before the authority's stream, late, sends it. Their
// first listing is served (nothing else is cached); their next one is kept
// aside while the authority's copy is awaited: the two streams are not
// ordered, and the authority, which speaks for m1 while its glob covers it,
// may send an older copy. The authority's late copy then holds, and once
// the glob ends the default servers, who think the relay holds their
// listing, are asked for it again. Their newer listing was served, and the
// authority's late, older copy then rolled the wildcard client back.
func TestNewMemberOfAnAnsweredGlobListedFirstIsNotRolledBack(t *testing.T) {
	m0, m1 := globAuth+"g/m0", globAuth+"g/m1"
	def := xdstest.StartUpstream(t)
	def.SetResources(clusters("c0", m0))
	g := xdstest.NewGlobADS(m0)
	auth := xdstest.StartUpstream(t, xdstest.WithADS(g))
	r := startDeltaFederation(t, def, auth)
	glob := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "glob"})
	glob.Subscribe(resource.ClusterType, globG)
	ackUntil(t, glob, []string{m0}, "the glob's subscriber never got the glob")
	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, "*")
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m0: "eds-" + m0})

	g.Pause(true) // the authority's stream is late
	g.Set(m0, m1) // m1 is eds-<m1> at the authority
	listing := func(c0, m1eds string) xdstest.Resources {
		return xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", c0),
			xdstest.EDSCluster(m0, "eds-"+m0), xdstest.EDSCluster(m1, m1eds)}}
	}
	def.SetResources(listing("eds-c0", "eds-"+m1))
	recvClusters(t, wild, map[string]string{"c0": "eds-c0", m0: "eds-" + m0, m1: "eds-" + m1})
	def.SetResources(listing("eds-c0-v2", "eds-m1-v2"))
	recvFirstListingHeld(t, wild, m1, "eds-c0-v2")
	from := len(auth.Requests())
	g.Pause(false)
	// The relay's ACK of the authority's late answer.
	auth.WaitRequest(t, from, "the relay's ACK of the authority's m1", func(xdstest.Request) bool { return true })
	def.SetResources(listing("eds-c0-v3", "eds-m1-v2"))
	recvFirstListingHeld(t, wild, m1, "eds-c0-v3")

	glob.Close()
	globUnsubscribed(t, r)
	recvClustersUntil(t, wild, map[string]string{"c0": "eds-c0-v3", m0: "eds-" + m0, m1: "eds-m1-v2"}) // theirs now
}

// recvFirstListingHeld receives CDS responses on wild until c0 is at c0eds,
// failing if any carries name at another content than eds-<name>, what the
// client got first.
func recvFirstListingHeld(t *testing.T, wild *xdstest.ADSClient, name, c0eds string) {
	t.Helper()
	for {
		resp := wild.RecvType(resource.ClusterType)
		wild.Ack(resp)
		got := edsNames(t, resp)
		if got[name] != "eds-"+name {
			t.Fatalf("the wildcard client, which holds %s at eds-%s, was sent %q while its authority's copy was awaited: %v", name, name, got[name], got)
		}
		if got["c0"] == c0eds {
			return
		}
	}
}
