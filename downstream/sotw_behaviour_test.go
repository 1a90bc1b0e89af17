package downstream_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// contents returns the bodies a SotW response carries, sorted.
func contents(t *testing.T, r *discoverypb.DiscoveryResponse) []string {
	t.Helper()
	return sortedContents(t, r.GetResources())
}

func sortedContents(t *testing.T, as []*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range as {
		var s wrapperspb.StringValue
		if err := a.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s.GetValue())
	}
	slices.Sort(out)
	return out
}

func wantContents(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("resources %v, want %v", got, want)
	}
}

// xDS SotW: an ACK is not answered; a NACK is not answered and nothing is
// resent until the resource changes; a request whose nonce is not the
// latest sent is stale and ignored, subscription included.
func TestSotWAckNackAndStaleNonce(t *testing.T) {
	src := newFakeSource()
	src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b1"})
	c := xdstest.DialADS(t, start(t, src), testNode)

	c.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType}) // legacy wildcard
	r1 := c.MustRecv()
	wantContents(t, contents(t, r1), []string{"a1", "b1"})
	c.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, VersionInfo: r1.GetVersionInfo(), ResponseNonce: r1.GetNonce()})
	c.ExpectNoResponse(quiet)

	src.publish(keying.ClusterType, map[string]string{"a": "a2", "b": "b1"})
	r2 := c.MustRecv()
	wantContents(t, contents(t, r2), []string{"a2", "b1"})
	if r2.GetNonce() == r1.GetNonce() || r2.GetVersionInfo() == r1.GetVersionInfo() {
		t.Fatalf("second response nonce %q version %q, the same as the first's", r2.GetNonce(), r2.GetVersionInfo())
	}
	c.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, VersionInfo: r1.GetVersionInfo(), ResponseNonce: r2.GetNonce(),
		ErrorDetail: &statuspb.Status{Message: "rejected"}})
	c.ExpectNoResponse(quiet)

	// Stale: the nonce of the first response. Its names would end the
	// wildcard if it were honoured.
	c.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResponseNonce: r1.GetNonce(), ResourceNames: []string{"a"}})
	c.ExpectNoResponse(quiet)

	src.publish(keying.ClusterType, map[string]string{"a": "a3", "b": "b1"})
	r3 := c.MustRecv()
	wantContents(t, contents(t, r3), []string{"a3", "b1"}) // still the wildcard
}

// xDS SotW: "*" subscribes LDS/CDS to everything, names to just those; a
// resource the wildcard covers that goes is left out of the next full state.
func TestSotWWildcardAndNames(t *testing.T) {
	src := newFakeSource()
	src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b1"})
	conn := start(t, src)
	wild, named := xdstest.DialADS(t, conn, testNode), xdstest.DialADS(t, conn, testNode)

	wild.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{keying.Wildcard}})
	r := wild.MustRecv()
	wantContents(t, contents(t, r), []string{"a1", "b1"})
	wild.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{keying.Wildcard},
		VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})

	named.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"b"}})
	rn := named.MustRecv()
	wantContents(t, contents(t, rn), []string{"b1"})
	named.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"b"},
		VersionInfo: rn.GetVersionInfo(), ResponseNonce: rn.GetNonce()})

	src.publish(keying.ClusterType, map[string]string{"b": "b1"}) // a is gone
	wantContents(t, contents(t, wild.MustRecv()), []string{"b1"})
	named.ExpectNoResponse(quiet)
}

// xDS: never the same name twice in one response. A glob member the
// default servers also list (Resource.Listed) is in the wildcard set and in
// its glob's: a SotW client subscribed to both gets it once. It came twice.
func TestSotWWildcardAndGlobCarryAListedMemberOnce(t *testing.T) {
	const (
		glob = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*"
		m    = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m"
	)
	src := newFakeSource()
	member := resource(m, "m1")
	member.Authority, member.Listed, member.Glob = "auth", true, glob
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": resource("c1", "c1"), m: member})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.MustSend(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{keying.Wildcard, glob}})
	wantContents(t, contents(t, c.MustRecv()), []string{"c1", "m1"})
}

// protoResource returns m as a View's resource called name.
func protoResource(t *testing.T, name string, m proto.Message) *downstream.Resource {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return &downstream.Resource{Name: name, Version: downstream.ResourceVersion(b), Any: b}
}

// Make before break for a name of another authority that the default
// servers list in their wildcard answer: a SotW wildcard Envoy got it
// through the wildcard, and its route refers to it. The upstream breaks
// first — the CDS without it comes before the RDS that moves the route — so
// the cluster stays with the client until the route moved, as a plain name
// does. It was dropped at once: the wildcard was taken to give only names
// of the default authority. With another CDS change before the route moves
// (seed 5451 of the oracle), it was dropped by the second response: the
// copy kept by the first was not in the View last sent, so the stream no
// longer took it for a listed name the client holds.
func TestSotWListedNameKeptWhileARouteRefersToIt(t *testing.T) {
	for _, changes := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d CDS changes", changes), func(t *testing.T) { testListedNameKept(t, changes) })
	}
}

func testListedNameKept(t *testing.T, changes int) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/svc%3A4"
	cx := "xdstp://auth/envoy.config.cluster.v3.Cluster/svc:4" // the cache's key
	src := newFakeSource()
	clusters := func(names ...string) map[string]*downstream.Resource {
		out := map[string]*downstream.Resource{}
		for _, n := range names {
			out[n] = protoResource(t, n, xdstest.EDSCluster(n, n))
		}
		return out
	}
	// (Authority "": the default servers delivered it, listing it.)
	src.publishResources(keying.ClusterType, clusters("c1", cx))
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", x))})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ClusterType, keying.Wildcard)
	r := c.RecvType(keying.ClusterType)
	wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1", cx})
	c.Ack(r)
	c.Subscribe(keying.RouteType, "r")
	c.Ack(c.RecvType(keying.RouteType))

	keeps := func(r *discoverypb.DiscoveryResponse) {
		t.Helper()
		if got := anyClusterNames(t, r); !slices.Contains(got, cx) {
			t.Fatalf("clusters %v before the route moved: %s removed while the route refers to it", got, x)
		}
		c.Ack(r)
	}
	final := []string{"c1"}
	if changes == 2 {
		final = []string{"c0", "c1"} // (a response of its own: the client did not hold c0)
	}
	src.publishResources(keying.ClusterType, clusters(final...)) // the upstream breaks first
	if changes == 2 {
		keeps(c.RecvType(keying.ClusterType))
		final = append(final, "c2")
		src.publishResources(keying.ClusterType, clusters(final...))
	}
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", "c1"))})
	for {
		r := c.MustRecv()
		if r.GetTypeUrl() == keying.RouteType {
			c.Ack(r)
			break
		}
		keeps(r)
	}
	r = c.RecvType(keying.ClusterType)
	wantNames(t, "clusters once the route moved", anyClusterNames(t, r), final)
}

// anyClusterNames returns the names of the Clusters a SotW response carries.
func anyClusterNames(t *testing.T, r *discoverypb.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.GetName())
	}
	slices.Sort(out)
	return out
}

// Make before break for a SotW Envoy that came back holding routes from
// elsewhere (a relay restart) while the relay's copy of one is unsure: that
// route is withheld (no rollback), so the client still runs its own version,
// which may refer to a cluster the upstream has since deleted. The CDS
// without that cluster waits until the route is sent. It was sent at once:
// the withheld route was taken to be what the client holds.
func TestSotWCDSWaitsForARouteWithheldFromElsewhere(t *testing.T) {
	src := newFakeSource()
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
	routes := map[string]*downstream.Resource{
		"ra": protoResource(t, "ra", xdstest.GRPCRoute("ra", "c1")),
		"rb": protoResource(t, "rb", xdstest.GRPCRoute("rb", "c1")), // the client holds rb → c2
	}
	src.publishView(keying.RouteType, routes, map[string]struct{}{"rb": {}})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
	src.publish(keying.EndpointType, map[string]string{"c1": "e1"})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType) // (listeners may refer to clusters too: it holds none)
	c.Ack(c.RecvType(keying.ListenerType))
	c.Resume(keying.RouteType, "v-before", "ra", "rb")
	r := c.RecvType(keying.RouteType)
	wantNames(t, "routes sent while rb is unsure", routeNames(t, r), []string{"ra"})
	c.Ack(r)
	c.Resume(keying.ClusterType, "v-before") // it holds c1 and c2
	// The stream handles requests in order: the EDS answer comes after
	// whatever the CDS request queued.
	c.Subscribe(keying.EndpointType, "c1")
	if r = c.MustRecv(); r.GetTypeUrl() == keying.ClusterType {
		t.Fatalf("clusters %v sent while the client's own rb may still refer to c2", anyClusterNames(t, r))
	}
	c.Ack(r)

	src.publishView(keying.RouteType, routes, nil) // the upstream confirms rb
	r = c.RecvType(keying.RouteType)
	wantNames(t, "routes once rb is confirmed", routeNames(t, r), []string{"rb"})
	c.Ack(r)
	r = c.RecvType(keying.ClusterType)
	wantNames(t, "clusters once rb moved", anyClusterNames(t, r), []string{"c1"})
}

// routeNames returns the names of the RouteConfigurations a SotW response
// carries.
func routeNames(t *testing.T, r *discoverypb.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		rc := &routev3.RouteConfiguration{}
		if err := a.UnmarshalTo(rc); err != nil {
			t.Fatal(err)
		}
		out = append(out, rc.GetName())
	}
	slices.Sort(out)
	return out
}

// Make before break keeps a cluster as the client holds it — after a NACK,
// the version it last ACKed, not the rejected one. The upstream dropped c1
// while its own route still refers to it (the relay keeps c1 with the
// client); the client rejected c1's last version, before the drop came or
// with it. It was kept at that rejected version, so a client that rejects
// a response whole (the oracle's picky SotW client; seed 221355) NACKed
// every later CDS and never got c2.
func TestSotWKeptClusterIsTheVersionTheClientAccepted(t *testing.T) {
	for _, nackFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("nack before the drop=%v", nackFirst), func(t *testing.T) { testKeptAccepted(t, nackFirst) })
	}
}

func testKeptAccepted(t *testing.T, nackFirst bool) {
	src := newFakeSource()
	clusters := func(c1 string, more ...string) map[string]*downstream.Resource {
		out := map[string]*downstream.Resource{}
		if c1 != "" {
			out["c1"] = protoResource(t, "c1", xdstest.EDSCluster("c1", c1))
		}
		for _, n := range more {
			out[n] = protoResource(t, n, xdstest.EDSCluster(n, n))
		}
		return out
	}
	src.publishResources(keying.ClusterType, clusters("good"))
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", "c1"))})
	src.publishResources(keying.EndpointType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.Endpoints("c1", "127.0.0.1:1"))})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Ack(c.RecvType(keying.ClusterType))
	c.Subscribe(keying.RouteType, "r")
	c.Ack(c.RecvType(keying.RouteType))
	nack := func(r *discoverypb.DiscoveryResponse) {
		c.Nack(r, "bad cluster")
		c.Subscribe(keying.EndpointType, "c1")
		c.Ack(c.RecvType(keying.EndpointType)) // (the stream has read the NACK)
	}
	src.publishResources(keying.ClusterType, clusters("rejected"))
	rejected := c.RecvType(keying.ClusterType)
	if nackFirst {
		nack(rejected)
	}
	src.publishResources(keying.ClusterType, clusters("", "c2")) // c1 dropped; the route still refers to it
	if !nackFirst {
		nack(c.RecvType(keying.ClusterType)) // c1 kept at the version it rejects, and c2
		src.publishResources(keying.ClusterType, clusters("", "c2", "c3"))
	}
	want := map[string]string{"c1": "good", "c2": "c2"}
	if !nackFirst {
		want["c3"] = "c3"
	}
	if got := clusterServices(t, c.RecvType(keying.ClusterType)); !maps.Equal(got, want) {
		t.Fatalf("clusters (name: EDS service) %v, want %v: c1 kept as the client holds it", got, want)
	}
}

// clusterServices returns the Clusters a SotW response carries, each with
// its EDS service name.
func clusterServices(t *testing.T, r *discoverypb.DiscoveryResponse) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, a := range r.GetResources() {
		cl := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(cl); err != nil {
			t.Fatal(err)
		}
		got[cl.GetName()] = cl.GetEdsClusterConfig().GetServiceName()
	}
	return got
}

// A SotW Envoy comes back holding x, another authority's cluster its
// wildcard CDS gave it while the default servers listed x, and a route r
// that refers to x. The default servers list x no more, and the upstream's
// move of r off x comes just after: the CDS answer waits for it, as it
// would for a plain cluster, rather than tell the client x is gone while
// its r still refers to it (seed 260000: a cluster the wildcard does not
// select by its name was not looked at).
func TestSotWListedClusterFromElsewhereWaitsForTheRouteMove(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	src := newFakeSource()
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", x))})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
	src.publish(keying.EndpointType, map[string]string{"c1": "e1"})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType)
	c.Ack(c.RecvType(keying.ListenerType))
	c.Resume(keying.RouteType, "v-before", "r")
	c.Ack(c.RecvType(keying.RouteType)) // r → x, as the client holds it
	resumed := time.Now()
	c.Resume(keying.ClusterType, "v-before") // it holds c1 and x
	// The stream handles requests in order: the EDS answer comes after
	// whatever the CDS request queued.
	c.Subscribe(keying.EndpointType, "c1")
	if r := c.MustRecv(); r.GetTypeUrl() == keying.ClusterType {
		if time.Since(resumed) >= time.Second {
			t.Skip("the machine took longer than the reconnect's grace (1 s) to answer: too slow to tell")
		}
		t.Fatalf("clusters %v sent while the client's r still refers to %s", anyClusterNames(t, r), x)
	} else {
		c.Ack(r)
	}

	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", "c1"))})
	r := c.RecvType(keying.RouteType)
	wantNames(t, "routes", routeNames(t, r), []string{"r"})
	c.Ack(r)
	r = c.RecvType(keying.ClusterType)
	wantNames(t, "clusters once r moved", anyClusterNames(t, r), []string{"c1"})
}

// A client that rejected the first response of a type that refers to
// clusters, and came with nothing, holds nothing of that type: its CDS
// removals go out. (The stream treated such a type as unreadable, which
// may refer to anything, and withheld every CDS response that dropped a
// cluster the client held until the client accepted a route.)
func TestSotWRejectedFirstRouteHoldsNothing(t *testing.T) {
	src := newFakeSource()
	cluster := func(n string) *downstream.Resource { return protoResource(t, n, xdstest.EDSCluster(n, n)) }
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": cluster("c1"), "c2": cluster("c2")})
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", "c2"))})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType)
	c.Ack(c.RecvType(keying.ListenerType))
	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Ack(c.RecvType(keying.ClusterType))
	c.Subscribe(keying.RouteType, "r")
	c.Nack(c.RecvType(keying.RouteType), "bad route")
	// The stream handles requests in order: the EDS answer comes after the
	// NACK is recorded.
	src.publish(keying.EndpointType, map[string]string{"c1": "e1"})
	c.Subscribe(keying.EndpointType, "c1")
	c.Ack(c.RecvType(keying.EndpointType))

	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": cluster("c1")})
	r := c.RecvType(keying.ClusterType)
	wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1"})
}

// A SotW Envoy comes back holding a route r that refers to x, another
// authority's cluster that no upstream has, ever (the route's own dangling
// reference, confirmed by its live upstream). The CDS answer may wait out
// the reconnect's grace (1 s), not longer: nothing will ever move r off x.
func TestSotWClusterFromElsewhereNeverListedDoesNotFreezeCDS(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	src := newFakeSource()
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", x))})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
	src.publish(keying.EndpointType, map[string]string{"c1": "e1"})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType)
	c.Ack(c.RecvType(keying.ListenerType))
	c.Resume(keying.RouteType, "v-before", "r")
	c.Ack(c.RecvType(keying.RouteType)) // r → x, as the client holds it
	resumed := time.Now()
	c.Resume(keying.ClusterType, "v-before")
	r := c.RecvType(keying.ClusterType) // (generous deadline: the grace is 1 s)
	t.Logf("clusters %v after %v", anyClusterNames(t, r), time.Since(resumed))
	wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1"})
}

// As above, but once the client holds r the relay's copy of r turns
// doubtful for good (its upstream went away and never comes back to
// confirm it): the CDS answer to the client from elsewhere may wait a
// while for the upstream's word on r, not for good — for another
// authority's cluster x and for a plain one alike.
func TestSotWClusterFromElsewhereDoubtfulRouteDoesNotFreezeCDS(t *testing.T) {
	for _, x := range []string{"xdstp://auth/envoy.config.cluster.v3.Cluster/x", "c2"} {
		t.Run(x, func(t *testing.T) {
			src := newFakeSource()
			src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
			routes := map[string]*downstream.Resource{"r": protoResource(t, "r", xdstest.GRPCRoute("r", x))}
			src.publishResources(keying.RouteType, routes)
			src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
			c := xdstest.DialADS(t, start(t, src), testNode)
			c.Subscribe(keying.ListenerType)
			c.Ack(c.RecvType(keying.ListenerType))
			c.Resume(keying.RouteType, "v-before", "r")
			c.Ack(c.RecvType(keying.RouteType)) // r → x, as the client holds it
			src.publishView(keying.RouteType, routes, map[string]struct{}{"r": {}})
			c.ExpectNoResponse(200 * time.Millisecond) // (r unchanged: nothing to send)
			resumed := time.Now()
			c.Resume(keying.ClusterType, "v-before")
			r := c.RecvType(keying.ClusterType)
			t.Logf("clusters %v after %v", anyClusterNames(t, r), time.Since(resumed))
			wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1"})
		})
	}
}

// A SotW client comes back holding a route the relay has never had (no
// upstream has it, ever): the stream cannot read what it refers to, but no
// listener the client holds names it, so it routes nothing and the CDS
// answer does not wait for it — not for good.
func TestReviewSotWClustersFromElsewhereWithAnUnknownRoute(t *testing.T) {
	src := newFakeSource()
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType)
	c.Ack(c.RecvType(keying.ListenerType))
	c.Resume(keying.RouteType, "v-before", "rx")
	c.Resume(keying.ClusterType, "v-before")
	for {
		r := c.MustRecv()
		c.Ack(r)
		if r.GetTypeUrl() == keying.ClusterType {
			wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1"})
			return
		}
	}
}

// As above, but a listener the client holds names the route the relay has
// never had: the route may refer to any cluster, and its listener's next
// change may be about to drop it, so the CDS answer waits — as long as the
// relay waits for the upstream's word (Options.AnswerWait), not for good.
func TestSotWClustersFromElsewhereWithAnUnknownNamedRoute(t *testing.T) {
	src := newFakeSource()
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": protoResource(t, "c1", xdstest.EDSCluster("c1", "c1"))})
	src.publishResources(keying.RouteType, map[string]*downstream.Resource{})
	src.publishResources(keying.ListenerType, map[string]*downstream.Resource{"l1": protoResource(t, "l1", xdstest.GRPCListener("l1", "rx"))})
	c := xdstest.DialADS(t, start(t, src), testNode)
	c.Subscribe(keying.ListenerType)
	c.Ack(c.RecvType(keying.ListenerType)) // l1 → rx
	c.Resume(keying.RouteType, "v-before", "rx")
	resumed := time.Now()
	c.Resume(keying.ClusterType, "v-before")
	for {
		r := c.MustRecv()
		c.Ack(r)
		if r.GetTypeUrl() == keying.ClusterType {
			t.Logf("clusters %v after %v", anyClusterNames(t, r), time.Since(resumed))
			wantNames(t, "clusters", anyClusterNames(t, r), []string{"c1"})
			return
		}
	}
}
