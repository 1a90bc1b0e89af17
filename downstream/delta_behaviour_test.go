package downstream_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// names returns the names of the resources a Delta response carries, sorted.
func names(r *discoverypb.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	slices.Sort(out)
	return out
}

func wantNames(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s %v, want %v", what, got, want)
	}
}

// xDS Delta: initial_resource_versions tell what the client holds from an
// earlier stream: a resource it holds at the current version is not sent.
func TestDeltaInitialResourceVersions(t *testing.T) {
	src := newFakeSource()
	v := src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b1"})
	c := xdstest.DialDelta(t, start(t, src), testNode)

	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"a", "b"},
		InitialResourceVersions: map[string]string{"a": v.Resources["a"].Version}})
	r := c.MustRecv()
	wantNames(t, "resources", names(r), []string{"b"})
	if got := r.GetResources()[0].GetVersion(); got != v.Resources["b"].Version {
		t.Fatalf("b at version %q, want %q", got, v.Resources["b"].Version)
	}
}

// xDS Delta: a resource that goes upstream is removed from a client that
// holds it; after an unsubscription, the client hears nothing more of the
// name.
func TestDeltaRemovalAndUnsubscribe(t *testing.T) {
	src := newFakeSource()
	src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b1"})
	c := xdstest.DialDelta(t, start(t, src), testNode)

	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"a", "b"}})
	r := c.MustRecv()
	wantNames(t, "resources", names(r), []string{"a", "b"})
	c.Ack(r)
	c.ExpectNoResponse(quiet)

	src.publish(keying.ClusterType, map[string]string{"a": "a1"})
	r = c.MustRecv()
	wantNames(t, "resources", names(r), nil)
	wantNames(t, "removals", r.GetRemovedResources(), []string{"b"})
	c.Ack(r)

	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesUnsubscribe: []string{"a"}})
	c.ExpectNoResponse(quiet)
	src.publish(keying.ClusterType, map[string]string{"a": "a2"})
	c.ExpectNoResponse(quiet)
}

// xDS Delta: a client that brought a version of a from elsewhere
// (initial_resource_versions) is not sent the View's unsure copy (no
// rollback); once it unsubscribes a it holds none, and subscribed again it
// is sent a like any new subscriber — at the latest once the upstream
// confirms a. It was never sent: its unsubscription left a marked as
// brought from elsewhere, so the resubscription was withheld as a rollback,
// then dropped as settled since the client held nothing.
func TestDeltaResubscribedAfterBroughtGetsTheName(t *testing.T) {
	src := newFakeSource()
	rs := map[string]*downstream.Resource{"a": resource("a", "a1")}
	src.publishView(keying.ClusterType, rs, map[string]struct{}{"a": {}})
	src.publish(keying.EndpointType, map[string]string{"e1": "e1", "e2": "e2"})
	c := xdstest.DialDelta(t, start(t, src), testNode)

	// The stream handles requests in order: the answer of an EDS
	// subscription comes after whatever the CDS requests before it queued.
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"a"},
		InitialResourceVersions: map[string]string{"a": "a-from-elsewhere"}})
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.EndpointType, ResourceNamesSubscribe: []string{"e1"}})
	if r := c.MustRecv(); r.GetTypeUrl() != keying.EndpointType {
		t.Fatalf("%v sent while a is unsure: it could roll the client back", names(r))
	}
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesUnsubscribe: []string{"a"}})
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"a"}})
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.EndpointType, ResourceNamesSubscribe: []string{"e2"}})
	var got []string
	for r := c.MustRecv(); r.GetTypeUrl() != keying.EndpointType; r = c.MustRecv() {
		got = append(got, names(r)...)
	}
	src.publishView(keying.ClusterType, rs, nil) // the upstream confirms a
	if len(got) == 0 {
		got = names(c.MustRecv())
	}
	wantNames(t, "resources after the resubscription", got, []string{"a"})
}

// xDS Delta: "*" subscribes to every resource of the type; a change sends
// only what changed.
func TestDeltaWildcardSendsOnlyChanges(t *testing.T) {
	src := newFakeSource()
	src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b1"})
	c := xdstest.DialDelta(t, start(t, src), testNode)

	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{keying.Wildcard}})
	r := c.MustRecv()
	wantNames(t, "resources", names(r), []string{"a", "b"})
	c.Ack(r)

	src.publish(keying.ClusterType, map[string]string{"a": "a1", "b": "b2", "c": "c1"})
	r = c.MustRecv()
	wantNames(t, "resources", names(r), []string{"b", "c"})
	wantNames(t, "removals", r.GetRemovedResources(), nil)
}

// Another authority's name the default servers stop listing (Resource.Listed),
// while its own authority's stream still delivers it, leaves the wildcard's
// set: a Delta client that holds it through the wildcard alone is told it is
// removed, one that names it keeps it. It stayed with the wildcard client.
func TestDeltaWildcardNameNoLongerListed(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	src := newFakeSource()
	c1, listed := resource("c1", "c1"), resource(x, "x1")
	listed.Authority, listed.Listed = "auth", true
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": c1, x: listed})
	addr := start(t, src)
	wild := xdstest.DialDelta(t, addr, testNode)
	wild.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	r := wild.MustRecv()
	wantNames(t, "resources", names(r), []string{"c1", x})
	wild.Ack(r)
	named := xdstest.DialDelta(t, addr, testNode)
	named.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*", x}})
	r = named.MustRecv()
	wantNames(t, "resources", names(r), []string{"c1", x})
	named.Ack(r)

	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": c1, x: listed.WithListed(false)})
	r = wild.MustRecv()
	wantNames(t, "removals", r.GetRemovedResources(), []string{x})
	named.ExpectNoResponse(quiet) // (as long as the other tests wait for a response that does not come)
}

// Another authority's name that only the default servers delivered (their
// wildcard answer lists it; no stream of its own authority has it) leaves
// the cache when they stop listing it: their complete wildcard set is their
// word on what the wildcard covers, so a Delta client that holds it through
// the wildcard alone is told it is removed. A client that names it keeps it:
// its own authority has not said it is gone. The removal was held back for
// good ("the cache does not know the resource is gone").
func TestDeltaWildcardListedNameLeavesTheCache(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	src := newFakeSource()
	c1 := resource("c1", "c1")
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": c1, x: resource(x, "x1")})
	addr := start(t, src)
	wild := xdstest.DialDelta(t, addr, testNode)
	wild.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	r := wild.MustRecv()
	wantNames(t, "resources", names(r), []string{"c1", x})
	wild.Ack(r)
	named := xdstest.DialDelta(t, addr, testNode)
	named.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*", x}})
	r = named.MustRecv()
	wantNames(t, "resources", names(r), []string{"c1", x})
	named.Ack(r)

	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": c1})
	r = wild.MustRecv()
	wantNames(t, "removals", r.GetRemovedResources(), []string{x})
	named.ExpectNoResponse(quiet) // (as long as the other tests wait for a response that does not come)
}

// A Delta wildcard client from elsewhere that brings another authority's
// name (initial_resource_versions) the default servers' whole, confirmed
// set does not list is told it is removed when the wildcard is answered:
// the wildcard is all it subscribed. The name was never looked at: the
// client kept it for good.
func TestDeltaWildcardBroughtUnlistedName(t *testing.T) {
	const x = "xdstp://auth/envoy.config.cluster.v3.Cluster/x"
	src := newFakeSource()
	c1 := resource("c1", "c1")
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{"c1": c1})
	c := xdstest.DialDelta(t, start(t, src), testNode)
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c1": c1.Version, x: "elsewhere"}})
	for {
		// (Make before break holds it back while the reconnect's grace
		// lasts: the client may not have asked for what refers to it yet.)
		r := c.MustRecv()
		if len(r.GetRemovedResources()) > 0 {
			wantNames(t, "removals", r.GetRemovedResources(), []string{x})
			return
		}
		c.Ack(r)
	}
}

// A Delta client is told that a glob collection's member it holds is gone
// once the glob's set is answered without it, though the View never listed
// the member as changed: the stream moved to its node's own scope, whose
// View never held it. Only members the client brought from elsewhere were
// looked at, and it kept the deleted one for good.
func TestDeltaGlobMemberMissingFromAnotherView(t *testing.T) {
	const p = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/"
	g, m1, m2 := p+"*", p+"m1", p+"m2"
	src := newFakeSource()
	r1, r2 := resource(m1, "m1"), resource(m2, "m2")
	r1.Authority, r1.Glob, r2.Authority, r2.Glob = "auth", g, "auth", g
	src.publishResources(keying.ClusterType, map[string]*downstream.Resource{m1: r1, m2: r2})
	c := xdstest.DialDelta(t, start(t, src), testNode)
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{g}})
	r := c.MustRecv()
	wantNames(t, "resources", names(r), []string{m1, m2})
	c.Ack(r)

	src.replace(&downstream.View{TypeURL: keying.ClusterType, Seq: 10, Resources: map[string]*downstream.Resource{m1: r1},
		Changed: map[string]struct{}{g: {}}, AnsweredGlobs: map[string]struct{}{g: {}}})
	r = c.MustRecv()
	wantNames(t, "removals", r.GetRemovedResources(), []string{m2})
}

// replace makes v its type's current View as it is (its Changed too) and
// tells every watcher of the type.
func (f *fakeSource) replace(v *downstream.View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views[v.TypeURL] = v
	for _, w := range f.ws[v.TypeURL] {
		w.Notify(v, nil)
	}
}

// slowWatch is a fakeSource whose Watch of one type waits until release is
// closed: a relay slow to take in a request (ten thousand names on a loaded
// machine).
type slowWatch struct {
	*fakeSource
	typeURL string
	release chan struct{}
}

func (s *slowWatch) Watch(w downstream.Watcher, typeURL string, c downstream.Change) {
	if typeURL == s.typeURL {
		<-s.release
	}
	s.fakeSource.Watch(w, typeURL, c)
}

// A Delta ADS client comes back (initial_resource_versions) holding l4 → r5
// → c1, which the upstream deleted, and sends its first request of every
// type at once; the relay takes longer than the reconnect's grace to read
// them (here its Watch of the EDS request, ahead of LDS and RDS, is slow).
// c1's removal waits until the client drops r5, as l4's removal tells it
// to: the grace counts only the time the stream waits for its client. The
// removal went out when the grace ran out, before the relay had read what
// refers to c1 (soak seed 372006: a 10,004-name EDS request).
func TestDeltaComebackSlowReadKeepsMakeBeforeBreak(t *testing.T) {
	src := &slowWatch{fakeSource: newFakeSource(), typeURL: keying.EndpointType, release: make(chan struct{})}
	src.publish(keying.ClusterType, map[string]string{"c2": "c2"})
	src.publish(keying.ListenerType, map[string]string{"l6": "l6"})
	c := xdstest.DialDelta(t, start(t, src), testNode)
	release := sync.OnceFunc(func() { close(src.release) })
	t.Cleanup(release) // (before the server stops: its handler waits in Watch)
	for _, req := range []*discoverypb.DeltaDiscoveryRequest{
		{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{"c1": "elsewhere"}},
		{TypeUrl: keying.EndpointType, ResourceNamesSubscribe: []string{"c1"}},
		{TypeUrl: keying.ListenerType, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{"l4": "elsewhere"}},
		{TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r5"}, InitialResourceVersions: map[string]string{"r5": "elsewhere"}},
	} {
		c.Send(req)
	}
	holdsR5 := true
	check := func(r *discoverypb.DeltaDiscoveryResponse) bool {
		t.Helper()
		c.Ack(r)
		removed := r.GetRemovedResources()
		switch {
		case r.GetTypeUrl() == keying.ListenerType && slices.Contains(removed, "l4"):
			c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResourceNamesUnsubscribe: []string{"r5"}})
			holdsR5 = false
		case r.GetTypeUrl() == keying.ClusterType && slices.Contains(removed, "c1"):
			if holdsR5 {
				t.Fatal("c1 removed while the client still holds r5, which may refer to it (the relay had not read its RDS request)")
			}
			return true
		}
		return false
	}
	// The grace is a second; twice that while the EDS request is being read
	// lets it run out if reading counted.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if r, ok := c.TryRecv(time.Until(deadline)); ok {
			check(r)
		}
	}
	release()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if r, ok := c.TryRecv(time.Until(deadline)); ok && check(r) {
			return
		}
	}
	t.Fatal("c1 was never removed")
}
