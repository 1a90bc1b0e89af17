package oracle

import (
	"context"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// TestToldAtCountsWhatTheRelayAcknowledged: a response the Upstream queued
// but the relay never acknowledged (the stream broke first, or it still sits
// behind a 10,000-cluster CDS response) has not told the relay of its names,
// so notFoundYet must still allow the relay's "does not exist" for them; nor
// has one it NACKed
// (seed 340087 of the final soak: relay-B1's RDS answer carrying r7 was
// lost in an upstream-down; after the reconnect the answer came 1.4 s late
// behind the large CDS, the relay's SotW RDS wait of 600 ms ended first, and
// the run failed with a phantom loss of a route the client never held).
func TestToldAtCountsWhatTheRelayAcknowledged(t *testing.T) {
	w := newWorld()
	s := &Snapshot{Res: map[string]map[string][]*Res{}}
	s.put(newRes(keying.RouteType, "r7", "", &route.RouteConfiguration{Name: "r7"}, nil))
	w.add(s)
	u := newUpstream(w, true, false, 1)
	var sent []*discoverypb.DiscoveryResponse
	st := u.open(false, func(m proto.Message) error {
		sent = append(sent, m.(*discoverypb.DiscoveryResponse))
		return nil
	})
	node := &corepb.Node{Id: "relay-B1"}
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B1 as soon as the Upstream queued it; the relay has not acknowledged it")
	}
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		VersionInfo: version(s), ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B1 acknowledged the response that carried it")
	}
	// A NACKed response is no answer: the relay holds none of it.
	other := u.open(false, func(proto.Message) error { return nil })
	node2 := &corepb.Node{Id: "relay-B2"}
	other.onSotW(&discoverypb.DiscoveryRequest{Node: node2, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	other.onSotW(&discoverypb.DiscoveryRequest{Node: node2, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		ResponseNonce: "1", ErrorDetail: &statuspb.Status{Message: "rejected"}})
	if _, told := u.ToldAt("relay-B2", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B2 by a response the relay NACKed")
	}
	// Delta: the same, each response acknowledged by its own nonce.
	d := u.open(true, func(proto.Message) error { return nil })
	node3 := &corepb.Node{Id: "relay-B3"}
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{Node: node3, TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r7"}})
	if _, told := u.ToldAt("relay-B3", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B3 as soon as the Upstream queued its Delta response")
	}
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B3", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B3 acknowledged the Delta response that carried it")
	}
}

// TestWindowsPerAuthorityStream: a relay scope keeps one upstream stream per
// authority, and an authority without servers of its own comes to the same
// Upstream; each stream applies or NACKs its own responses, so one stream's
// acknowledgement of a newer state says nothing of what the other brought.
// Seed 360195: relay-A2's default stream acknowledged snapshot 8 (its
// listing of g/m11 at the new content, which the relay does not store while
// the authority speaks for the name), its authority stream rejected its
// answer of 8 (invalid); the run failed with "rolled back: … g/m11 content
// 497e…, older than the ac91… it holds (it brought it)" — the relay had
// nothing newer from the authority. On 5cd9342 the same seed failed for c19
// the other way round (the default stream NACKed 8, the authority's ACKed it).
func TestWindowsPerAuthorityStream(t *testing.T) {
	const glob = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*"
	const m11 = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m11"
	w := newWorld()
	snap := func(gen string) *Snapshot {
		s := &Snapshot{Res: map[string]map[string][]*Res{}}
		s.put(newRes(keying.ClusterType, "c19", "", &cluster.Cluster{Name: "c19", AltStatName: gen}, nil))
		s.put(newRes(keying.ClusterType, m11, "", &cluster.Cluster{Name: m11, AltStatName: gen}, nil))
		w.add(s)
		return s
	}
	old := snap("old")
	u := newUpstream(w, true, false, 1)
	node := &corepb.Node{Id: "relay-A2"}
	def := u.open(false, func(proto.Message) error { return nil })
	auth := u.open(false, func(proto.Message) error { return nil })
	def.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.ClusterType})
	auth.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.ClusterType, ResourceNames: []string{glob}})
	def.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, VersionInfo: version(old), ResponseNonce: "1"})
	auth.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{glob},
		VersionInfo: version(old), ResponseNonce: "1"})
	snap("new")
	u.publish()
	// The default stream applies the new state; the authority's answer is
	// still on its way (or was rejected).
	def.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, VersionInfo: "i1", ResponseNonce: "2"})
	// A client moves to relay-A2 with the new content from its sibling.
	since := u.Windows("relay-A2", keying.ClusterType)

	windows := u.Windows("relay-A2", keying.ClusterType)
	current := func(name string) func(int) bool {
		hash := old.Res[keying.ClusterType][name][0].Hash
		return func(i int) bool { return w.CurrentAt(keying.ClusterType, name, "", hash, i) }
	}
	if !within(windows, since, m11, current(m11)) {
		t.Errorf("relay-A2 may not have %s's old content, but its authority's stream has told it nothing newer (windows %v)", m11, windows)
	}
	if within(windows, since, "c19", current("c19")) {
		t.Errorf("relay-A2 may have c19's old content, but the default stream, which alone brings c19, applied the new one (windows %v)", windows)
	}
}

// TestToldForgottenOnceTheRelayUnsubscribes: a name the relay unsubscribed
// upstream may leave its cache (the LRU of unreferenced resources), so what
// an earlier acknowledged response told it no longer says that it knows the
// name; subscribed again, the upstream's silence past the does-not-exist
// time may answer "not found yet" (seed 371205, dims large,gcp,
// max_unreferenced=2: relay-B5 ACKed EDS c3 at 52.300, its clients left,
// the name was unsubscribed and evicted; c6 subscribed it again at 58.9,
// go-control-plane answered the 10,004-name request only after the relay's
// 600 ms wait, and the run failed with a phantom loss of c3, which c6 never
// held). Both upstreams: the oracle's own and go-control-plane's callbacks.
func TestToldForgottenOnceTheRelayUnsubscribes(t *testing.T) {
	w := newWorld()
	s := &Snapshot{Res: map[string]map[string][]*Res{}}
	s.put(newRes(keying.RouteType, "r7", "", &route.RouteConfiguration{Name: "r7"}, nil))
	w.add(s)
	u := newUpstream(w, true, false, 1)
	st := u.open(false, func(proto.Message) error { return nil })
	node := &corepb.Node{Id: "relay-B1"}
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		VersionInfo: version(s), ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B1 acknowledged the response that carried it")
	}
	st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, VersionInfo: version(s), ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); told {
		t.Error("r7 still counts as told to relay-B1 after it unsubscribed r7 (SotW), which it may have evicted since")
	}

	d := u.open(true, func(proto.Message) error { return nil })
	node3 := &corepb.Node{Id: "relay-B3"}
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{Node: node3, TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r7"}})
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: "1"})
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResourceNamesUnsubscribe: []string{"r7"}})
	if _, told := u.ToldAt("relay-B3", keying.RouteType, "r7"); told {
		t.Error("r7 still counts as told to relay-B3 after it unsubscribed r7 (Delta)")
	}

	g := newUpstream(w, true, false, 1)
	g.useGCP()
	cb := g.gcp.callbacks(g)
	req := &discoverypb.DiscoveryRequest{Node: &corepb.Node{Id: "relay-B5"}, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}}
	_ = cb.StreamRequestFunc(1, req)
	r7, err := anypb.New(&route.RouteConfiguration{Name: "r7"})
	if err != nil {
		t.Fatal(err)
	}
	cb.StreamResponseFunc(context.Background(), 1, req, &discoverypb.DiscoveryResponse{TypeUrl: keying.RouteType,
		VersionInfo: "i0", Nonce: "1", Resources: []*anypb.Any{r7}})
	_ = cb.StreamRequestFunc(1, &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		VersionInfo: "i0", ResponseNonce: "1"})
	if _, told := g.ToldAt("relay-B5", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B5 acknowledged go-control-plane's response that carried it")
	}
	_ = cb.StreamRequestFunc(1, &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, VersionInfo: "i0", ResponseNonce: "1"})
	if _, told := g.ToldAt("relay-B5", keying.RouteType, "r7"); told {
		t.Error("r7 still counts as told to relay-B5 after it unsubscribed r7 from go-control-plane")
	}
	// go-control-plane answers the request without names as a legacy
	// wildcard; the relay, which subscribes nothing of the type, ignores the
	// answer and ACKs it all the same (seed 371205 on replay).
	cb.StreamResponseFunc(context.Background(), 1, req, &discoverypb.DiscoveryResponse{TypeUrl: keying.RouteType,
		VersionInfo: "i0", Nonce: "2", Resources: []*anypb.Any{r7}})
	_ = cb.StreamRequestFunc(1, &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, VersionInfo: "i0", ResponseNonce: "2"})
	if _, told := g.ToldAt("relay-B5", keying.RouteType, "r7"); told {
		t.Error("r7 counts as told to relay-B5 by its ACK of an answer to no subscription of r7, which it ignored")
	}
}

// fakeSotW is a client's SotW stream that sends nowhere.
type fakeSotW struct{}

func (fakeSotW) Send(*discoverypb.DiscoveryRequest) error      { return nil }
func (fakeSotW) Recv() (*discoverypb.DiscoveryResponse, error) { select {} }

// TestNotFoundYetOnceNoClientWatched: a relay evicts only what none of its
// clients watches (relay/evict.go), and may then unsubscribe a name without
// the upstream seeing it: on a new stream that no longer names it, or in
// one request that drops and adds it again (seed 371205, dims large,gcp:
// relay-B5's EDS request carried c3 until its stream was replaced by one
// that did not; c6 subscribed c3 again and go-control-plane answered only
// after the relay's wait: "not found yet" for a name it had evicted). So
// "not found yet" is allowed once no client of the relay watched the name
// after it was last told of it — and refused while one watched it
// throughout, or once it was told again since.
func TestNotFoundYetOnceNoClientWatched(t *testing.T) {
	s, u, watch := routesOfRelayB5()
	relay := func(st *ustream, names ...string) {
		st.onSotW(&discoverypb.DiscoveryRequest{Node: &corepb.Node{Id: "relay-B5"}, TypeUrl: keying.RouteType,
			ResourceNames: names})
		st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: names,
			VersionInfo: version(s), ResponseNonce: "1"})
	}
	c2 := watch("c2")
	relay(u.open(false, func(proto.Message) error { return nil }), "r7")
	time.Sleep(1100 * time.Millisecond) // past notFoundYet's second for an answer in flight
	c7 := watch("c7")
	if c7.notFoundYet(keying.RouteType, "r7") {
		t.Error(`"not found yet" allowed for r7, which c2 watched on relay-B5 throughout since the relay was told of it`)
	}
	// Every client leaves; the relay's new stream subscribes r9 only.
	c2.dropLocked()
	c7.dropLocked()
	relay(u.open(false, func(proto.Message) error { return nil }), "r9")
	c6 := watch("c6")
	if !c6.notFoundYet(keying.RouteType, "r7") {
		t.Error(`"not found yet" refused for r7, which no client of relay-B5 watched for a while: the relay may have evicted it`)
	}
	// Subscribed again, the relay is told of r7 again: it knows it.
	relay(u.open(false, func(proto.Message) error { return nil }), "r7", "r9")
	if c6.notFoundYet(keying.RouteType, "r7") {
		t.Error(`"not found yet" allowed for r7, which relay-B5 was told of again while c6 watched it`)
	}
}

// TestNotFoundYetFromWhenTheAnswerWasSent: the relay applied a response no
// earlier than it was sent, but its acknowledgement may be read much later
// (go-control-plane reads requests between sends of a 10,000-name answer):
// judged by the time the acknowledgement was read, a client that began to
// watch the name after the relay applied the response seemed to watch it
// since before (seed 371205 on replay: relay-B5 applied r5 at 45.724 and
// then unsubscribed and evicted it, but go-control-plane read the ACK after
// c6 had subscribed r5 at 47.649).
func TestNotFoundYetFromWhenTheAnswerWasSent(t *testing.T) {
	s, u, watch := routesOfRelayB5()
	st := u.open(false, func(proto.Message) error { return nil })
	node := &corepb.Node{Id: "relay-B5"}
	c2 := watch("c2")
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		VersionInfo: version(s), ResponseNonce: "1"})
	time.Sleep(1100 * time.Millisecond) // past notFoundYet's second for an answer in flight
	c2.dropLocked()
	// The relay subscribes r9 too: the answer (nonce 2) carries r7 again.
	st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"r7", "r9"},
		VersionInfo: version(s), ResponseNonce: "1"})
	time.Sleep(10 * time.Millisecond) // (c6 begins to watch strictly later)
	c6 := watch("c6")
	st.onSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"r7", "r9"},
		VersionInfo: version(s), ResponseNonce: "2"})
	if !c6.notFoundYet(keying.RouteType, "r7") {
		t.Error(`"not found yet" refused for r7, which no client of relay-B5 watched when the relay applied the last answer carrying it`)
	}
}

// routesOfRelayB5 returns a world of routes r7 and r9, its upstream, and a
// function that starts a client of relay-B5 watching r7.
func routesOfRelayB5() (*Snapshot, *Upstream, func(id string) *Client) {
	w := newWorld()
	s := &Snapshot{Res: map[string]map[string][]*Res{}}
	s.put(newRes(keying.RouteType, "r7", "", &route.RouteConfiguration{Name: "r7"}, nil))
	s.put(newRes(keying.RouteType, "r9", "", &route.RouteConfiguration{Name: "r9"}, nil))
	w.add(s)
	u := newUpstream(w, true, false, 1)
	r := &Run{world: w, ups: []*Upstream{u}, relays: []*relaySlot{{id: "relay-B5"}}, clients: map[string]*Client{},
		log: zap.NewNop()}
	watch := func(id string) *Client {
		c := newClient(r, ClientSpec{ID: id})
		c.streams = map[string]*cstream{"": {sotw: fakeSotW{}, cancel: func() {}}}
		c.mu.Lock()
		c.types[keying.RouteType].names["r7"] = true
		c.requestLocked(keying.RouteType, nil, nil)
		c.mu.Unlock()
		return c
	}
	return s, u, watch
}
