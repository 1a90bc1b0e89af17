package upstream_test

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// Subscribe and Unsubscribe reach a real go-control-plane server as the
// right SotW request sequence, each response is ACKed, and only the first
// request of the stream carries the configured node.
func TestSotWSubscribeAckUnsubscribe(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("a"), cluster("b"), cluster("c"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, "b", "a")
	cur, ucur := 0, 0

	req := cp.NextSotW(t, &cur, keying.ClusterType)
	if !proto.Equal(req.GetNode(), testNode()) {
		t.Errorf("first request node = %v, want %v", req.GetNode(), testNode())
	}
	if got := req.GetResourceNames(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("first request names = %q, want [a b]", got)
	}
	if req.GetVersionInfo() != "" || req.GetResponseNonce() != "" {
		t.Errorf("first request version/nonce = %q/%q, want empty", req.GetVersionInfo(), req.GetResponseNonce())
	}

	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if got := sorted(names(u)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("update names = %q, want [a b]", got)
	}
	if u.Delta || u.Complete || len(u.Removed) != 0 || u.Server != cp.Addr() {
		t.Errorf("update = %+v, want SotW, not wildcard, nothing removed, from %s", u, cp.Addr())
	}
	for _, r := range u.Resources {
		if r.Any.GetTypeUrl() != keying.ClusterType || r.Version != "" {
			t.Errorf("resource %q: type %q version %q", r.Name, r.Any.GetTypeUrl(), r.Version)
		}
	}

	ack := cp.NextSotW(t, &cur, keying.ClusterType)
	if ack.GetVersionInfo() == "" || ack.GetResponseNonce() == "" || ack.GetErrorDetail() != nil {
		t.Errorf("ACK = %v, want version and nonce, no error", ack)
	}
	if ack.GetNode() != nil {
		t.Errorf("ACK carries node %v; only the first request of a stream should", ack.GetNode())
	}
	if got := ack.GetResourceNames(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ACK names = %q, want [a b]", got)
	}

	st := c.Status()
	if st.State != upstream.StateConnected || st.Server != cp.Addr() || st.Mode != upstream.ModeSotW {
		t.Errorf("status = %+v", st)
	}
	if len(st.Types) != 1 || !slices.Equal(st.Types[0].Names, []string{"a", "b"}) ||
		st.Types[0].Version != ack.GetVersionInfo() || st.Types[0].Nonce != ack.GetResponseNonce() {
		t.Errorf("status types = %+v", st.Types)
	}

	c.Unsubscribe(keying.ClusterType, "b")
	req = cp.NextSotW(t, &cur, keying.ClusterType)
	if got := req.GetResourceNames(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after Unsubscribe names = %q, want [a]", got)
	}
	if req.GetVersionInfo() != ack.GetVersionInfo() || req.GetResponseNonce() != ack.GetResponseNonce() {
		t.Errorf("after Unsubscribe version/nonce = %q/%q, want %q/%q",
			req.GetVersionInfo(), req.GetResponseNonce(), ack.GetVersionInfo(), ack.GetResponseNonce())
	}

	// A full-state response omitting a subscribed name removes it.
	xdstest.Eventually(t, func() bool {
		lc := cp.LinearCache(keying.ClusterType)
		return lc.NumWatches("a") == 1 && lc.NumWatches("b") == 0
	}, "a watch on a only", nil)
	cp.DeleteResources(keying.ClusterType, "a")
	u = rec.nextUpdate(t, &ucur, keying.ClusterType)
	if len(u.Resources) != 0 || !slices.Equal(u.Removed, []string{"a"}) {
		t.Errorf("after delete: resources %q removed %q, want none and [a]", names(u), u.Removed)
	}
	ack2 := cp.NextSotW(t, &cur, keying.ClusterType)
	if ack2.GetVersionInfo() == ack.GetVersionInfo() || ack2.GetErrorDetail() != nil {
		t.Errorf("second ACK = %v, want a new version", ack2)
	}

	// Unsubscribing the last name sends an empty list (not a legacy
	// wildcard: the stream has named resources before).
	c.Unsubscribe(keying.ClusterType, "a")
	req = cp.NextSotW(t, &cur, keying.ClusterType)
	if len(req.GetResourceNames()) != 0 {
		t.Errorf("after last Unsubscribe names = %q, want none", req.GetResourceNames())
	}
}

// A wildcard subscription is sent as an explicit "*" merged with the
// explicit names, the updates say Wildcard, and removals cover every name
// the wildcard brought.
func TestSotWWildcardMergedWithNames(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("a"), cluster("b"), cluster("c"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, "b", keying.Wildcard)
	cur, ucur := 0, 0
	req := cp.NextSotW(t, &cur, keying.ClusterType)
	if got := req.GetResourceNames(); !slices.Equal(got, []string{"*", "b"}) {
		t.Errorf("names = %q, want [* b]", got)
	}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !u.Complete || !slices.Equal(sorted(names(u)), []string{"a", "b", "c"}) {
		t.Errorf("update wildcard=%v names=%q, want true [a b c]", u.Complete, names(u))
	}
	cp.NextSotW(t, &cur, keying.ClusterType) // ACK

	cp.DeleteResources(keying.ClusterType, "c")
	u = rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !slices.Equal(u.Removed, []string{"c"}) {
		t.Errorf("removed = %q, want [c]", u.Removed)
	}
	cp.NextSotW(t, &cur, keying.ClusterType) // ACK

	// Dropping the wildcard keeps only the explicit name of interest: a
	// response without "a" does not report it removed.
	c.Unsubscribe(keying.ClusterType, keying.Wildcard)
	req = cp.NextSotW(t, &cur, keying.ClusterType)
	if got := req.GetResourceNames(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("names after dropping wildcard = %q, want [b]", got)
	}
	xdstest.Eventually(t, func() bool {
		lc := cp.LinearCache(keying.ClusterType)
		return lc.NumWatches("b") == 1 && lc.NumWildcardWatches() == 0
	}, "a watch on b only", nil)
	cp.UpdateResources(keying.ClusterType, cluster("b"), cluster("d"))
	u = rec.nextUpdate(t, &ucur, keying.ClusterType)
	if u.Complete || !slices.Equal(names(u), []string{"b"}) || len(u.Removed) != 0 {
		t.Errorf("update = wildcard %v names %q removed %q, want false [b] []", u.Complete, names(u), u.Removed)
	}
	if st := c.Status(); len(st.Types) != 1 || st.Types[0].Wildcard || !slices.Equal(st.Types[0].Names, []string{"b"}) {
		t.Errorf("status types = %+v", st.Types)
	}
}

// Several types share the one ADS stream; the node is sent once.
func TestSotWSeveralTypesOneStream(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("c1"))
	cp.UpdateResources(keying.EndpointType, endpoints("c1"))
	cp.UpdateResources(keying.ListenerType, listener("l1"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Subscribe(keying.EndpointType, "c1")
	c.Subscribe(keying.ListenerType, "l1")
	for _, typ := range []string{keying.ClusterType, keying.EndpointType, keying.ListenerType} {
		ucur := 0
		u := rec.nextUpdate(t, &ucur, typ)
		want := map[string]string{keying.ClusterType: "c1", keying.EndpointType: "c1", keying.ListenerType: "l1"}[typ]
		if !slices.Equal(names(u), []string{want}) {
			t.Errorf("%s: names %q, want [%s]", typ, names(u), want)
		}
	}
	streams, nodes := map[int64]bool{}, 0
	for _, r := range cp.Requests() {
		streams[r.StreamID] = true
		if r.SotW.GetNode() != nil {
			nodes++
		}
	}
	if len(streams) != 1 || nodes != 1 {
		t.Errorf("requests on %d streams with %d nodes, want 1 and 1", len(streams), nodes)
	}
}

// A legacy wildcard (the empty list) cannot be dropped in SotW: the server
// keeps answering, and the client ACKs and ignores. Subscribed again, the
// type is asked for with no version, so the server answers with what it
// has — the same request again would get nothing, and the relay's cache
// would never fill.
func TestSotWWildcardAgainAfterDropped(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("a"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, keying.Wildcard)
	cur, ucur := 0, 0
	cp.NextSotW(t, &cur, keying.ClusterType)
	rec.nextUpdate(t, &ucur, keying.ClusterType)
	cp.NextSotW(t, &cur, keying.ClusterType) // ACK

	c.Unsubscribe(keying.ClusterType, keying.Wildcard)
	cp.NextSotW(t, &cur, keying.ClusterType)
	cp.UpdateResources(keying.ClusterType, cluster("a"), cluster("b")) // answered, ignored
	cp.NextSotW(t, &cur, keying.ClusterType)                           // its ACK

	c.Subscribe(keying.ClusterType, keying.Wildcard)
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if got := sorted(names(u)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("update names = %q, want [a b]", got)
	}
}

// A name in the type's first request on a stream is in every request the
// server can answer on it: a full-state response without it says it does
// not exist (the relay had it from a warm-restart file, say, and the
// upstream deleted it meanwhile), though this stream never received it.
func TestSotWFirstRequestNameMissingIsRemoved(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("b"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, "a", "b")
	ucur := 0
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !slices.Equal(names(u), []string{"b"}) || !slices.Equal(u.Removed, []string{"a"}) {
		t.Errorf("update names %q removed %q, want [b] [a]", names(u), u.Removed)
	}
}

// Names unsubscribed in one call, a glob collection among them, are no
// longer of interest: a full-state response without them, or without the
// glob's members, removes nothing.
func TestSotWUnsubscribedTogetherNotRemoved(t *testing.T) {
	f := &scriptedADS{sotw: make(chan *discoveryv3.DiscoveryResponse, 4)}
	s := xdstest.StartUpstream(t, xdstest.WithADS(f))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	const glob = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*"
	const member = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m1"
	answer := func(nonce string, names ...string) {
		r := &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: nonce, Nonce: nonce}
		for _, n := range names {
			r.Resources = append(r.Resources, mustAny(t, cluster(n)))
		}
		f.sotw <- r
	}
	cur, ucur := 0, 0
	c.Subscribe(keying.ClusterType, glob, "a", "b", "c")
	s.NextSotW(t, &cur, keying.ClusterType)
	answer("1", member, "a", "b", "c")
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); len(u.Resources) != 4 {
		t.Fatalf("first update brings %q, want the member, a, b and c", names(u))
	}
	c.Unsubscribe(keying.ClusterType, glob, "a", "b")
	for req := s.NextSotW(t, &cur, keying.ClusterType); !slices.Equal(req.GetResourceNames(), []string{"c"}); {
		req = s.NextSotW(t, &cur, keying.ClusterType) // (the ACK may come first)
	}
	answer("2", "c")
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); len(u.Removed) != 0 || !slices.Equal(names(u), []string{"c"}) {
		t.Errorf("the answer to [c] brings %q and removes %q, want [c] and nothing", names(u), u.Removed)
	}
}
