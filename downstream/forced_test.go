package downstream

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
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

// routeStream is a SotW stream of RDS whose forced items (the relay's
// answers to its subscription changes) the test hands over when it likes.
type routeStream struct {
	t   *testing.T
	src *deferredSource
	rec *recorder[*discoverypb.DiscoveryResponse]
	st  *stream
}

func newRouteStream(t *testing.T) *routeStream {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	return &routeStream{t: t, src: src, rec: rec,
		st: &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}}
}

// request sends a request for names that ACKs (or NACKs) the last response.
func (r *routeStream) request(nack bool, names ...string) {
	r.t.Helper()
	req := &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: names}
	if n := len(r.rec.sent); n > 0 {
		req.VersionInfo, req.ResponseNonce = r.rec.sent[n-1].GetVersionInfo(), r.rec.sent[n-1].GetNonce()
	}
	if nack {
		req.VersionInfo, req.ErrorDetail = "", &status.Status{Message: "rejected"}
	}
	if err := r.st.handleSotW(req); err != nil {
		r.t.Fatal(err)
	}
}

// forced is the relay's answer to the latest subscription change, from v.
func (r *routeStream) forced(v *View) {
	r.st.Notify(v, r.src.forced[len(r.src.forced)-1])
}

// holds returns the content the client holds of each route, from every
// response it got (SotW RDS: a response carries what changed).
func (r *routeStream) holds() map[string]string {
	out := map[string]string{}
	for _, resp := range r.rec.sent {
		for _, res := range resp.GetResources() {
			var w wrapperspb.StringValue
			if err := res.UnmarshalTo(&w); err != nil {
				r.t.Fatal(err)
			}
			out[strings.TrimRight(w.GetValue(), "0123456789")] = w.GetValue()
		}
	}
	return out
}

// nextView returns v changed: each name of content holds that content.
func nextView(v *View, seq uint64, content map[string]string) *View {
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

// A change queued before a subscription's forced item, from an older View,
// answers the newly subscribed route with its version then; the route
// changed again before the subscription (the stream did not watch it, so
// nothing queued that change): the forced item, from the newer View, sends
// it, or the client keeps the older version for good (found by the oracle,
// seed 1701006: the older change was a rollout barrier released late). So
// too when the route became a TP3 error meanwhile (found by a review).
func TestForcedItemAfterAnOlderAnswer(t *testing.T) {
	for _, errored := range []bool{false, true} {
		t.Run(fmt.Sprintf("error=%v", errored), func(t *testing.T) {
			r := newRouteStream(t)
			v1 := fuzzView(keying.RouteType, "x", "n")
			r.request(false, "x")
			r.forced(v1)
			r.st.flush()
			v2 := nextView(v1, 2, map[string]string{"x": "x2", "n": "n2"}) // queued: the stream watches x
			r.st.Notify(v2, nil)
			v3 := nextView(v2, 3, map[string]string{"n": "n3"}) // not queued: nobody here watches n
			if errored {
				delete(v3.Resources, "n")
				v3.Errors = map[string]*ResourceError{"n": {Name: "n", Code: codes.Unavailable, Message: "unreachable"}}
			}
			r.request(false, "x", "n")
			r.st.flush() // v2, built for [x n]: n at n2
			r.forced(v3)
			r.st.flush()
			switch got := r.holds()["n"]; {
			case !errored && got != "n3":
				t.Fatalf("the client holds route n at %q; the View it subscribed in has n3", got)
			case errored && len(r.rec.sent[len(r.rec.sent)-1].GetResourceErrors()) == 0:
				t.Fatalf("the client was not sent n's error; it holds n at %q", got)
			}
		})
	}
}

// The same, when a later change sent the route's newer version before the
// forced item came and the client ACKed (or NACKed) it: the forced item
// sends nothing (found by a review: it resent it).
func TestForcedItemAfterANewerAnswer(t *testing.T) {
	for _, nack := range []bool{false, true} {
		t.Run(fmt.Sprintf("nack=%v", nack), func(t *testing.T) {
			r := newRouteStream(t)
			v1 := fuzzView(keying.RouteType, "x", "n")
			r.request(false, "x")
			r.forced(v1)
			r.st.flush()
			v2 := nextView(v1, 2, map[string]string{"x": "x2", "n": "n2"})
			r.st.Notify(v2, nil)
			r.st.Notify(fuzzView(keying.ClusterType, "c"), nil) // (keeps the two apart)
			v3 := nextView(v2, 3, map[string]string{"x": "x3", "n": "n3"})
			r.st.Notify(v3, nil)
			r.request(false, "x", "n")
			r.st.flush()
			if got := r.holds()["n"]; got != "n3" {
				t.Fatalf("the client holds route n at %q, want n3", got)
			}
			r.request(nack, "x", "n")
			sent := len(r.rec.sent)
			r.forced(v3)
			r.st.flush()
			if len(r.rec.sent) != sent {
				t.Fatalf("n3 resent after the client's verdict on it (NACK: %v)", nack)
			}
		})
	}
}

// What a stream remembers of the names it subscribed goes when it drops
// them (found by a review: a name created upstream after its subscription's
// forced item was remembered for good).
func TestAnsweredNamesForgottenWhenDropped(t *testing.T) {
	r := newRouteStream(t)
	v := fuzzView(keying.RouteType, "x")
	r.request(false, "x")
	r.forced(v)
	r.st.flush()
	for i := range 100 {
		n := fmt.Sprintf("r%d", i)
		r.request(false, "x", n)
		r.forced(v) // n does not exist yet
		r.st.flush()
		v = nextView(v, v.Seq+1, map[string]string{n: n}) // now it does
		r.st.Notify(v, nil)
		r.st.flush()
		r.request(false, "x")
		r.st.flush()
	}
	if ts := r.st.types[keying.RouteType]; len(ts.answeredWith)+len(ts.unanswered) != 0 {
		t.Fatalf("after 100 names subscribed and dropped the stream remembers %d answered and %d unanswered",
			len(ts.answeredWith), len(ts.unanswered))
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

// Once a response answered every newly subscribed name, the stream keeps no
// map of them: a map never shrinks, and every stream of a fleet keeps its
// typeState for life.
func TestAnsweredNamesReleased(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("e%d", i)
	}
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.EndpointType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	st.Notify(fuzzView(keying.EndpointType, names...), src.forced[0])
	st.flush()
	if len(rec.sent) != 1 || len(rec.sent[0].GetResources()) != len(names) {
		t.Fatalf("%d responses to the first request", len(rec.sent))
	}
	if ts := st.types[keying.EndpointType]; ts.unanswered != nil || ts.answeredWith != nil {
		t.Fatalf("answered, the stream still keeps unanswered=%v answeredWith=%v", ts.unanswered, ts.answeredWith)
	}
}

// The same for a wildcard subscription (LDS/CDS): once a response answered
// it, the stream keeps no empty map of it (issue 26: two a stream at 100,000
// streams, about 0.35 KiB each).
func TestAnsweredWildcardReleased(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType}); err != nil {
		t.Fatal(err)
	}
	st.Notify(fuzzView(keying.ClusterType, "c1", "c2"), src.forced[0])
	st.flush()
	if len(rec.sent) != 1 || len(rec.sent[0].GetResources()) != 2 {
		t.Fatalf("%d responses to the wildcard request", len(rec.sent))
	}
	if ts := st.types[keying.ClusterType]; ts.unanswered != nil || ts.answeredWith != nil {
		t.Fatalf("answered, the stream still keeps unanswered=%v answeredWith=%v", ts.unanswered, ts.answeredWith)
	}
}
