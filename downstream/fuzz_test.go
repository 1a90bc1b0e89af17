package downstream

import (
	"context"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
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

// recordingStream is a grpc.ServerStream that keeps what is sent.
type recordingStream struct {
	sent []*discoverypb.DiscoveryResponse
}

func (r *recordingStream) SetHeader(metadata.MD) error  { return nil }
func (r *recordingStream) SendHeader(metadata.MD) error { return nil }
func (r *recordingStream) SetTrailer(metadata.MD)       {}
func (r *recordingStream) Context() context.Context     { return context.Background() }
func (r *recordingStream) RecvMsg(any) error            { return fmt.Errorf("unused") }
func (r *recordingStream) SendMsg(m any) error {
	e := m.(*encoded)
	resp := &discoverypb.DiscoveryResponse{}
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
	return v
}

// FuzzSotWRequests feeds arbitrary request sequences to one SotW stream. It
// must never panic, never put a name twice in a response, and never answer a
// request whose nonce is stale.
func FuzzSotWRequests(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{1, 1, 1, 9, 200, 3, 17, 33, 65})
	f.Fuzz(func(t *testing.T, script []byte) {
		src := &fakeSource{views: map[string]*View{
			keying.ClusterType:  fuzzView(keying.ClusterType, "a", "b", "c"),
			keying.EndpointType: fuzzView(keying.EndpointType, "a", "b"),
		}}
		srv := NewServer(src, Options{Metrics: metrics.New(), MaxNamesPerRequest: 8})
		defer srv.Close()
		rec := &recordingStream{}
		st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
		pool := []string{"a", "b", "c", "d", "*", ""}
		types := []string{keying.ClusterType, keying.EndpointType, "", "bad type"}
		for len(script) >= 3 {
			op, a, b := script[0], script[1], script[2]
			script = script[3:]
			req := &discoverypb.DiscoveryRequest{TypeUrl: types[int(a)%len(types)]}
			for i := range int(b % 5) {
				req.ResourceNames = append(req.ResourceNames, pool[(int(a)+i*int(b))%len(pool)])
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
					v := &wrapperspb.StringValue{}
					if err := a.UnmarshalTo(v); err != nil {
						t.Fatal(err)
					}
					if seen[v.Value] {
						t.Fatalf("name %q twice in one response", v.Value)
					}
					seen[v.Value] = true
				}
			}
		}
	})
}
