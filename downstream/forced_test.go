package downstream

import (
	"maps"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// deferredSource records the changes it is asked to watch; the test hands
// over their forced items when it likes (the relay's Watch runs after the
// stream's subscription changed, and other changes may be built between).
type deferredSource struct{ forced [][]string }

func (d *deferredSource) Bind(Watcher, *corev3.Node) error { return nil }
func (d *deferredSource) Cancel(Watcher)                   {}
func (d *deferredSource) Watch(_ Watcher, _ string, c Change) {
	d.forced = append(d.forced, append(c.Add, c.Remove...))
}

// A change queued before a subscription change but built after it carries
// the newly subscribed resource already: the subscription's own forced item
// then sends nothing — the client had got it and ACKed it (found by the
// oracle: a SotW CDS response resent at the version the client had ACKed).
func TestForcedItemAfterAChangeAnsweredIt(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}

	v1 := fuzzView(keying.ClusterType, "a", "b")
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	st.Notify(v1, src.forced[0])
	st.flush()
	if len(rec.sent) != 1 {
		t.Fatalf("%d responses to the first request", len(rec.sent))
	}
	// a changes (queued, not sent yet); the client moves from a to b.
	v2 := v1.Next(2, map[string]struct{}{"a": {}})
	v2.Resources = map[string]*Resource{"b": v1.Resources["b"]}
	any2, _ := anypb.New(wrapperspb.String("a2"))
	b2, _ := proto.Marshal(any2)
	v2.Resources["a"] = &Resource{Name: "a", Version: ResourceVersion(b2), Any: b2}
	st.Notify(v2, nil)
	first := rec.sent[0]
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"b"},
		VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	st.flush() // the change of a, built for the subscription [b]
	if len(rec.sent) != 2 || len(rec.sent[1].GetResources()) != 1 {
		t.Fatalf("after the change: %d responses", len(rec.sent))
	}
	second := rec.sent[1]
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"b"},
		VersionInfo: second.GetVersionInfo(), ResponseNonce: second.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	st.Notify(v2, src.forced[1]) // the subscription's own item, late
	st.flush()
	if len(rec.sent) != 2 {
		t.Fatalf("b resent at version %s the client had ACKed", rec.sent[2].GetVersionInfo())
	}
}

// A change queued before a subscription's forced item, from an older View,
// answers the newly subscribed route with its version then; the route
// changed again before the subscription (the stream did not watch it, so
// nothing queued that change): the forced item, from the newer View, sends
// it, or the client keeps the older version for good (found by the oracle,
// seed 1701006: the older change was a rollout barrier released late).
func TestForcedItemAfterAnOlderAnswer(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	next := func(v *View, seq uint64, content map[string]string) *View {
		changed := make(map[string]struct{})
		res := maps.Clone(v.Resources)
		for n, c := range content {
			a, _ := anypb.New(wrapperspb.String(c))
			b, _ := proto.Marshal(a)
			res[n] = &Resource{Name: n, Version: ResourceVersion(b), Any: b}
			changed[n] = struct{}{}
		}
		nv := v.Next(seq, changed)
		nv.Resources = res
		return nv
	}
	request := func(names ...string) {
		t.Helper()
		req := &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: names}
		if n := len(rec.sent); n > 0 {
			req.VersionInfo, req.ResponseNonce = rec.sent[n-1].GetVersionInfo(), rec.sent[n-1].GetNonce()
		}
		if err := st.handleSotW(req); err != nil {
			t.Fatal(err)
		}
	}

	v1 := fuzzView(keying.RouteType, "x", "n")
	request("x")
	st.Notify(v1, src.forced[0])
	st.flush()
	v2 := next(v1, 2, map[string]string{"x": "x2", "n": "n2"}) // queued: the stream watches x
	st.Notify(v2, nil)
	v3 := next(v2, 3, map[string]string{"n": "n3"}) // not queued: nobody here watches n
	request("x", "n")
	st.flush() // v2, built for [x n]: n at n2
	st.Notify(v3, src.forced[1])
	st.flush()
	var got string
	for _, resp := range rec.sent {
		for _, r := range resp.GetResources() {
			var w wrapperspb.StringValue
			if err := r.UnmarshalTo(&w); err != nil {
				t.Fatal(err)
			}
			if w.GetValue() == "n2" || w.GetValue() == "n3" || w.GetValue() == "n" {
				got = w.GetValue()
			}
		}
	}
	if got != "n3" {
		t.Fatalf("the client holds route n at %q; the View it subscribed in has n3", got)
	}
}

// Stale LDS/CDS requests: only the latest counts. A client that dropped a
// name in one and named it again in the next, before the response reached
// it, got the name with that response (full state): ACKing it, it is not
// sent the same again (found by the oracle).
func TestStaleDropNamedAgainBeforeTheResponse(t *testing.T) {
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := newFuzzStream(t, false, rec)
	send := func(nonce, version string, names ...string) {
		t.Helper()
		if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: names,
			VersionInfo: version, ResponseNonce: nonce}); err != nil {
			t.Fatal(err)
		}
		st.flush()
	}
	send("", "", "a")
	if len(rec.sent) != 1 {
		t.Fatalf("%d responses to the first request", len(rec.sent))
	}
	first := rec.sent[0]
	send("", "", "b") // stale: sent before the response arrived
	send("", "", "a") // stale too: a named again
	send(first.GetNonce(), first.GetVersionInfo(), "a")
	if len(rec.sent) != 1 {
		t.Fatalf("a resent at version %s the client had ACKed", rec.sent[1].GetVersionInfo())
	}
}

// Stale RDS/EDS requests: a name dropped in one and named again in the next
// is not dropped when the latest response carries it — the client got it
// after naming it again, and ACKing that response it is not sent the same
// again (found by the oracle, seed 308030). Dropped after the response that
// carried it, it is sent again.
func TestStaleDropNamedAgainBeforeTheResponseEDS(t *testing.T) {
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := newFuzzStream(t, false, rec)
	send := func(nonce, version string, names ...string) {
		t.Helper()
		if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.EndpointType, ResourceNames: names,
			VersionInfo: version, ResponseNonce: nonce}); err != nil {
			t.Fatal(err)
		}
		st.flush()
	}
	send("", "", "a")
	if len(rec.sent) != 1 {
		t.Fatalf("%d responses to the first request", len(rec.sent))
	}
	first := rec.sent[0]
	send("", "")      // stale: sent before the response arrived
	send("", "", "a") // stale too: a named again
	send(first.GetNonce(), first.GetVersionInfo(), "a")
	if len(rec.sent) != 1 {
		t.Fatalf("a resent at version %s the client had ACKed", rec.sent[1].GetVersionInfo())
	}

	send(first.GetNonce(), first.GetVersionInfo(), "a", "b") // b: a response with b alone
	if len(rec.sent) != 2 {
		t.Fatalf("%d responses, want the one for b", len(rec.sent))
	}
	second := rec.sent[1]
	send(first.GetNonce(), first.GetVersionInfo(), "b")      // stale: a dropped after the response that carried it
	send(first.GetNonce(), first.GetVersionInfo(), "a", "b") // stale: a named again
	send(second.GetNonce(), second.GetVersionInfo(), "a", "b")
	if len(rec.sent) != 3 || len(rec.sent[2].GetResources()) != 1 {
		t.Fatalf("a, dropped by the client, not sent again: %d responses", len(rec.sent))
	}
}
