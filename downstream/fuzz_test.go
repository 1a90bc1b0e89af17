package downstream

import (
	"context"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// fakeSource serves fixed Views: a small fake of our own Source interface.
type fakeSource struct{ views map[string]*View }

func (f *fakeSource) Bind(Watcher, *corev3.Node) error { return nil }
func (f *fakeSource) Cancel(Watcher)                   {}
func (f *fakeSource) Watch(w Watcher, typeURL string, c Change) {
	force := append(c.Add, c.Answer...)
	if c.Wildcard != nil && *c.Wildcard {
		force = append(force, keying.Wildcard)
	}
	force = append(force, c.Remove...)
	if v := f.views[typeURL]; v != nil && len(force) > 0 {
		w.Notify(v, force)
	}
}

// recorder is a grpc.ServerStream that keeps the responses sent, decoded
// into fresh() messages.
type recorder[T proto.Message] struct {
	fresh func() T
	sent  []T
}

func (r *recorder[T]) SetHeader(metadata.MD) error  { return nil }
func (r *recorder[T]) SendHeader(metadata.MD) error { return nil }
func (r *recorder[T]) SetTrailer(metadata.MD)       {}
func (r *recorder[T]) Context() context.Context     { return context.Background() }
func (r *recorder[T]) RecvMsg(any) error            { return fmt.Errorf("unused") }
func (r *recorder[T]) SendMsg(m any) error {
	e := m.(*encoded)
	resp := r.fresh()
	if err := proto.Unmarshal(append(append([]byte{}, e.body...), e.nonce...), resp); err != nil {
		return err
	}
	r.sent = append(r.sent, resp)
	return nil
}

func fuzzView(typeURL string, names ...string) *View {
	v := &View{TypeURL: typeURL, Seq: 1, Resources: map[string]*Resource{}, Complete: true}
	for _, n := range names {
		a, _ := anypb.New(wrapperspb.String(n))
		b, _ := proto.Marshal(a)
		v.Resources[n] = &Resource{Name: n, Version: ResourceVersion(b), Any: b}
	}
	// A TP2 variant of "a", selected for the subscription a{env=prod}.
	if a := v.Resources["a"]; a != nil {
		c := keying.ValueConstraint("env", "prod")
		cw, _ := proto.Marshal(c)
		variant := &Resource{Name: "a", Version: ResourceVersion(append(a.Any, 'v')), Any: a.Any,
			Constraints: keying.CanonicalConstraints(c), ConstraintsWire: cw}
		key := keying.SubscriptionKey("a", "env=prod")
		v.Resources[key] = variant.Selected(key)
	}
	return v
}

// fuzzLocators are the TP2 locators a fuzzed request may carry.
var fuzzLocators = []*discoverypb.ResourceLocator{
	{Name: "a", DynamicParameters: map[string]string{"env": "prod"}},
	{Name: "a"},
	{Name: "*", DynamicParameters: map[string]string{"env": "prod"}},
	{Name: "b", DynamicParameters: map[string]string{"env": "test", "zone": "z"}},
}

// The names and type URLs fuzzed requests draw from.
var (
	fuzzNames = []string{"a", "b", "c", "d", "*", ""}
	fuzzTypes = []string{keying.ClusterType, keying.EndpointType, "", "bad type"}
)

// newFuzzStream returns a SotW or Delta stream over fixed Views, sending to
// ss. Its server has no sender goroutines: the test flushes the stream
// itself. The server is closed when the test ends.
func newFuzzStream(t *testing.T, delta bool, ss grpc.ServerStream) *stream {
	src := &fakeSource{views: map[string]*View{
		keying.ClusterType:  fuzzView(keying.ClusterType, "a", "b", "c"),
		keying.EndpointType: fuzzView(keying.EndpointType, "a", "b"),
	}}
	srv := NewServer(src, Options{Metrics: metrics.New(), MaxNamesPerRequest: 8})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	st := &stream{srv: srv, ss: ss, delta: delta, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	if delta {
		st.proto = "delta"
	}
	return st
}

// FuzzSotWRequests feeds arbitrary request sequences to one SotW stream. It
// must never panic, never put a name twice in a response, and never answer a
// request whose nonce is stale.
func FuzzSotWRequests(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{1, 1, 1, 9, 200, 3, 17, 33, 65})
	f.Add([]byte{0, 1, 0x21, 1, 1, 0x41, 0, 0, 0x61})
	f.Fuzz(func(t *testing.T, script []byte) {
		rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
		st := newFuzzStream(t, false, rec)
		pool, types := fuzzNames, fuzzTypes
		for len(script) >= 3 {
			op, a, b := script[0], script[1], script[2]
			script = script[3:]
			req := &discoverypb.DiscoveryRequest{TypeUrl: types[int(a)%len(types)]}
			for i := range int(b % 5) {
				req.ResourceNames = append(req.ResourceNames, pool[(int(a)+i*int(b))%len(pool)])
			}
			for i := range int(b>>5) % 3 {
				req.ResourceLocators = append(req.ResourceLocators, fuzzLocators[(int(a)+i)%len(fuzzLocators)])
			}
			before := len(rec.sent)
			stale := false
			switch op % 4 {
			case 1: // echo the latest nonce (ACK)
				if n := len(rec.sent); n > 0 {
					req.ResponseNonce, req.VersionInfo = rec.sent[n-1].Nonce, rec.sent[n-1].VersionInfo
					req.TypeUrl = rec.sent[n-1].TypeUrl
				}
			case 2: // NACK the latest
				if n := len(rec.sent); n > 0 {
					req.ResponseNonce, req.TypeUrl = rec.sent[n-1].Nonce, rec.sent[n-1].TypeUrl
					req.ErrorDetail = &status.Status{Message: "no"}
				}
			case 3: // a nonce never sent
				req.ResponseNonce = "bogus"
				st.mu.Lock()
				ts := st.types[req.TypeUrl]
				stale = ts != nil && ts.lastNonce != ""
				st.mu.Unlock()
			}
			if err := st.handleSotW(req); err != nil {
				return // the stream would end here
			}
			st.flush()
			if stale && len(rec.sent) != before {
				t.Fatalf("answered a stale request: %v", req)
			}
			for _, resp := range rec.sent[before:] {
				seen := map[string]bool{}
				for _, a := range resp.Resources {
					id := ""
					if a.GetTypeUrl() == keying.ResourceWrapperType {
						// A TP2 variant: unique by name and constraints.
						w := &discoverypb.Resource{}
						if err := a.UnmarshalTo(w); err != nil {
							t.Fatal(err)
						}
						if w.GetResourceName().GetName() == "" {
							t.Fatalf("wrapped resource without resource_name: %v", w)
						}
						id = "tp2:" + keying.CanonicalConstraints(w.GetResourceName().GetDynamicParameterConstraints()) + ":"
						a = w.GetResource()
					}
					v := &wrapperspb.StringValue{}
					if err := a.UnmarshalTo(v); err != nil {
						t.Fatal(err)
					}
					id += v.Value
					if seen[id] {
						t.Fatalf("resource %q twice in one response", id)
					}
					seen[id] = true
				}
			}
		}
	})
}

// FuzzDeltaRequests feeds arbitrary incremental request sequences, names and
// TP2 locators mixed, to one Delta stream. It must never panic, never send
// and remove one resource in a response, and send a TP2 variant only with
// its resource_name.
func FuzzDeltaRequests(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{0, 1, 0x21, 1, 1, 0x41, 2, 0, 0x61, 3, 2, 0x22})
	f.Fuzz(func(t *testing.T, script []byte) {
		rec := &recorder[*discoverypb.DeltaDiscoveryResponse]{fresh: func() *discoverypb.DeltaDiscoveryResponse { return &discoverypb.DeltaDiscoveryResponse{} }}
		st := newFuzzStream(t, true, rec)
		pool, types := fuzzNames, fuzzTypes
		for len(script) >= 3 {
			op, a, b := script[0], script[1], script[2]
			script = script[3:]
			req := &discoverypb.DeltaDiscoveryRequest{TypeUrl: types[int(a)%len(types)]}
			for i := range int(b % 4) {
				n := pool[(int(a)+i*int(b))%len(pool)]
				if op&4 == 0 {
					req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
				} else {
					req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
				}
			}
			for i := range int(b>>5) % 3 {
				l := fuzzLocators[(int(a)+i)%len(fuzzLocators)]
				if op&8 == 0 {
					req.ResourceLocatorsSubscribe = append(req.ResourceLocatorsSubscribe, l)
				} else {
					req.ResourceLocatorsUnsubscribe = append(req.ResourceLocatorsUnsubscribe, l)
				}
			}
			if n := len(rec.sent); n > 0 && op&1 == 1 {
				req.ResponseNonce, req.TypeUrl = rec.sent[n-1].Nonce, rec.sent[n-1].TypeUrl
				if op&2 == 2 {
					req.ErrorDetail = &status.Status{Message: "no"}
				}
			}
			before := len(rec.sent)
			if err := st.handleDelta(req); err != nil {
				return // the stream would end here
			}
			st.flush()
			for _, resp := range rec.sent[before:] {
				sent := map[string]bool{}
				for _, r := range resp.GetResources() {
					if rn := r.GetResourceName(); rn != nil {
						if r.GetName() != "" || rn.GetName() == "" {
							t.Fatalf("TP2 variant with name %q and resource_name %v", r.GetName(), rn)
						}
						continue
					}
					sent[r.GetName()] = true
				}
				for _, n := range resp.GetRemovedResources() {
					if sent[n] {
						t.Fatalf("%q sent and removed in one response", n)
					}
				}
			}
		}
	})
}
