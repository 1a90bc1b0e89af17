package upstream_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// startFake starts a SotW server that sends whatever the test pushes, for
// the malformed responses go-control-plane cannot produce.
func startFake(t *testing.T) (*xdstest.Upstream, chan<- *discoveryv3.DiscoveryResponse) {
	t.Helper()
	f := &scriptedADS{sotw: make(chan *discoveryv3.DiscoveryResponse, 10)}
	s := xdstest.StartUpstream(t, xdstest.WithADS(f))
	return s, f.sotw
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func rawAny(typeURL string, b []byte) *anypb.Any { return &anypb.Any{TypeUrl: typeURL, Value: b} }

func wrapped(t *testing.T, w *discoveryv3.Resource) *anypb.Any {
	t.Helper()
	return mustAny(t, w)
}

const unknownType = "type.googleapis.com/test.Unknown"

// stringField encodes field num as a length-delimited string.
func stringField(num protowire.Number, s string) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// Invalid responses are NACKed with codes.InvalidArgument, a clear reason,
// the last accepted version and the response's nonce; the Handler never sees
// them.
func TestSotWNackInvalidResponses(t *testing.T) {
	tests := []struct {
		name      string
		typeURL   string
		resources func(t *testing.T) []*anypb.Any
		reject    error // returned by the handler
		reason    string
	}{
		{
			name:    "type mismatch",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{mustAny(t, cluster("a")), mustAny(t, listener("l"))}
			},
			reason: "does not match the response type_url",
		},
		{
			name:    "wrapped type mismatch",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{wrapped(t, &discoveryv3.Resource{Name: "l", Resource: mustAny(t, listener("l"))})}
			},
			reason: "does not match the response type_url",
		},
		{
			name:    "name and resource_name both set",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{wrapped(t, &discoveryv3.Resource{Name: "a", ResourceName: &discoveryv3.ResourceName{Name: "a"},
					Resource: mustAny(t, cluster("a"))})}
			},
			reason: "both name and resource_name",
		},
		{
			name:    "duplicate TP2 variant",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				v := &discoveryv3.Resource{ResourceName: &discoveryv3.ResourceName{Name: "a", DynamicParameterConstraints: envIs("prod")},
					Resource: mustAny(t, cluster("a"))}
				return []*anypb.Any{wrapped(t, v), wrapped(t, v)}
			},
			reason: `duplicate name "a"`,
		},
		{
			name:    "duplicate names",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{mustAny(t, cluster("a")), mustAny(t, cluster("b")), mustAny(t, cluster("a"))}
			},
			reason: `duplicate name "a"`,
		},
		{
			name:    "truncated registered type",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{rawAny(keying.ClusterType, []byte{0x0a, 0x05, 'a'})}
			},
			reason: "decode",
		},
		{
			name:    "registered type that does not decode",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				// Well-formed wire format, but name is not valid UTF-8.
				return []*anypb.Any{rawAny(keying.ClusterType, stringField(1, "\xff\xfe"))}
			},
			reason: "decode",
		},
		{
			name:    "unknown type with bad wire format",
			typeURL: unknownType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{rawAny(unknownType, []byte{0x0a, 0x09, 'x'})}
			},
			reason: "decode",
		},
		{
			name:    "no name",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{mustAny(t, cluster(""))}
			},
			reason: "no name",
		},
		{
			name:    "undecodable wrapper",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{rawAny(keying.ResourceWrapperType, []byte{0x1a, 0x7f})}
			},
			reason: "decode " + keying.ResourceWrapperType,
		},
		{
			name:    "handler rejects",
			typeURL: keying.ClusterType,
			resources: func(t *testing.T) []*anypb.Any {
				return []*anypb.Any{mustAny(t, cluster("a"))}
			},
			reject: errors.New("relay: cluster a is not acceptable"),
			reason: "relay: cluster a is not acceptable",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, resp := startFake(t)
			rec := &recorder{}
			c := newClient(t, upstream.ModeSotW, rec, s.Addr())
			c.Subscribe(tc.typeURL, "a")
			cur := 0
			s.NextSotW(t, &cur, tc.typeURL)

			// A valid first response, accepted.
			good := rawAny(tc.typeURL, stringField(1, "a"))
			if tc.typeURL == keying.ClusterType {
				good = mustAny(t, cluster("a"))
			}
			resp <- &discoveryv3.DiscoveryResponse{TypeUrl: tc.typeURL, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{good}}
			if ack := s.NextSotW(t, &cur, tc.typeURL); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
				t.Fatalf("first response not ACKed: %v", ack)
			}
			accepted := rec.numUpdates()

			rec.setReject(func(upstream.Update) error { return tc.reject })
			resp <- &discoveryv3.DiscoveryResponse{TypeUrl: tc.typeURL, VersionInfo: "v2", Nonce: "n2", Resources: tc.resources(t)}
			nack := s.NextSotW(t, &cur, tc.typeURL)
			if nack.GetErrorDetail() == nil {
				t.Fatalf("want a NACK, got %v", nack)
			}
			if codes.Code(nack.GetErrorDetail().GetCode()) != codes.InvalidArgument {
				t.Errorf("NACK code = %v, want InvalidArgument", codes.Code(nack.GetErrorDetail().GetCode()))
			}
			if !strings.Contains(nack.GetErrorDetail().GetMessage(), tc.reason) {
				t.Errorf("NACK message = %q, want it to contain %q", nack.GetErrorDetail().GetMessage(), tc.reason)
			}
			if nack.GetVersionInfo() != "v1" || nack.GetResponseNonce() != "n2" {
				t.Errorf("NACK version/nonce = %q/%q, want v1/n2", nack.GetVersionInfo(), nack.GetResponseNonce())
			}
			if !slices.Equal(nack.GetResourceNames(), []string{"a"}) {
				t.Errorf("NACK names = %q, want [a]", nack.GetResourceNames())
			}
			// The NACK is queued after OnUpdate would have run, so the count
			// is final here.
			wantUpdates := accepted
			if tc.reject != nil {
				wantUpdates++ // the handler saw it and rejected it
			}
			if got := rec.numUpdates(); got != wantUpdates {
				t.Errorf("handler saw %d updates, want %d", got, wantUpdates)
			}
			if st := c.Status(); st.Types[0].Version != "v1" || st.Types[0].Nonce != "n2" {
				t.Errorf("status after NACK = %+v, want version v1 nonce n2", st.Types[0])
			}

			// The next valid response is ACKed normally.
			rec.setReject(nil)
			resp <- &discoveryv3.DiscoveryResponse{TypeUrl: tc.typeURL, VersionInfo: "v3", Nonce: "n3", Resources: []*anypb.Any{good}}
			if ack := s.NextSotW(t, &cur, tc.typeURL); ack.GetVersionInfo() != "v3" || ack.GetResponseNonce() != "n3" || ack.GetErrorDetail() != nil {
				t.Errorf("after NACK, want ACK v3/n3, got %v", ack)
			}
		})
	}
}

// Resources wrapped in envoy.service.discovery.v3.Resource are unwrapped (name
// from the wrapper, TTL and cache control kept), heartbeats are reported as
// such and not as removals, unknown types are accepted when well-formed, and
// the server's bytes are handed over untouched.
func TestSotWAcceptedShapes(t *testing.T) {
	s, resp := startFake(t)
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	c.Subscribe(keying.ClusterType, "a", "w")
	c.Subscribe(unknownType, "u")
	cur, ucur := 0, 0
	s.NextSotW(t, &cur, keying.ClusterType)
	s.NextSotW(t, &cur, unknownType)

	// Field order reversed on purpose: the bytes must survive as sent.
	odd := append(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1), stringField(1, "a")...)
	inner := mustAny(t, cluster("inner-name"))
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{
		rawAny(keying.ClusterType, odd),
		wrapped(t, &discoveryv3.Resource{Name: "w", Resource: inner, Ttl: durationpb.New(5 * time.Second),
			CacheControl: &discoveryv3.Resource_CacheControl{DoNotCache: true}}),
	}}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !slices.Equal(names(u), []string{"a", "w"}) {
		t.Fatalf("names = %q, want [a w]", names(u))
	}
	if !bytes.Equal(u.Resources[0].Any.GetValue(), odd) {
		t.Errorf("bytes of a were changed")
	}
	w := u.Resources[1]
	if w.Any.GetTypeUrl() != keying.ClusterType || !bytes.Equal(w.Any.GetValue(), inner.GetValue()) ||
		w.TTL != 5*time.Second || !w.DoNotCache || w.Heartbeat {
		t.Errorf("wrapped resource = %+v", w)
	}
	s.NextSotW(t, &cur, keying.ClusterType) // ACK

	// A heartbeat for w: a response of heartbeats only refreshes TTLs, it
	// is no full state (a is not removed).
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v1", Nonce: "n2", Resources: []*anypb.Any{
		wrapped(t, &discoveryv3.Resource{Name: "w", Version: "v1", Ttl: durationpb.New(5 * time.Second)}),
	}}
	u = rec.nextUpdate(t, &ucur, keying.ClusterType)
	if len(u.Resources) != 1 || !u.Resources[0].Heartbeat || u.Resources[0].Any != nil || len(u.Removed) != 0 {
		t.Errorf("heartbeat update = %+v", u)
	}
	s.NextSotW(t, &cur, keying.ClusterType) // ACK

	// w resent: a full state that omits a.
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v2", Nonce: "n4", Resources: []*anypb.Any{
		wrapped(t, &discoveryv3.Resource{Name: "w", Resource: inner, Ttl: durationpb.New(5 * time.Second)}),
	}}
	u = rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !slices.Equal(names(u), []string{"w"}) || !slices.Equal(u.Removed, []string{"a"}) {
		t.Errorf("full state update = %+v", u)
	}

	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: unknownType, VersionInfo: "x1", Nonce: "n3", Resources: []*anypb.Any{
		rawAny(unknownType, append(stringField(7, "other"), stringField(1, "u")...)),
	}}
	u = rec.nextUpdate(t, &ucur, unknownType)
	if !slices.Equal(names(u), []string{"u"}) {
		t.Errorf("unknown type names = %q, want [u]", names(u))
	}
	if ack := s.NextSotW(t, &cur, unknownType); ack.GetVersionInfo() != "x1" || ack.GetErrorDetail() != nil {
		t.Errorf("unknown type not ACKed: %v", ack)
	}
}

// A response for a type nobody subscribed is ACKed and ignored.
func TestSotWUnsolicitedTypeAckedAndIgnored(t *testing.T) {
	s, resp := startFake(t)
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	c.Subscribe(keying.ClusterType, "a")
	cur := 0
	s.NextSotW(t, &cur, keying.ClusterType)

	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.EndpointType, VersionInfo: "e1", Nonce: "n1",
		Resources: []*anypb.Any{mustAny(t, endpoints("a"))}}
	ack := s.NextSotW(t, &cur, keying.EndpointType)
	if ack.GetVersionInfo() != "e1" || ack.GetResponseNonce() != "n1" || ack.GetErrorDetail() != nil || len(ack.GetResourceNames()) != 0 {
		t.Errorf("ACK = %v, want e1/n1, no names", ack)
	}
	if n := rec.numUpdates(); n != 0 {
		t.Errorf("handler saw %d updates, want 0", n)
	}
}

func envIs(v string) *discoveryv3.DynamicParameterConstraints {
	return keying.ValueConstraint("env", v)
}

// xRFC TP2: subscription keys with parameters go out as resource locators
// beside the plain names, and variants of one name (other constraints) are
// accepted with their constraints.
func TestSotWTP2Locators(t *testing.T) {
	s, resp := startFake(t)
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	c.Subscribe(keying.ClusterType, "plain", keying.SubscriptionKey("r", keying.CanonicalParams(map[string]string{"env": "prod"})))
	cur, ucur := 0, 0
	req := s.NextSotW(t, &cur, keying.ClusterType)
	locs := req.GetResourceLocators()
	if !slices.Equal(req.GetResourceNames(), []string{"plain"}) || len(locs) != 1 || locs[0].GetName() != "r" ||
		locs[0].GetDynamicParameters()["env"] != "prod" || len(locs[0].GetDynamicParameters()) != 1 {
		t.Fatalf("request names %v, locators %v", req.GetResourceNames(), locs)
	}

	variant := func(env string) *anypb.Any {
		return wrapped(t, &discoveryv3.Resource{Resource: mustAny(t, cluster("r")),
			ResourceName: &discoveryv3.ResourceName{Name: "r", DynamicParameterConstraints: envIs(env)}})
	}
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v1", Nonce: "n1",
		Resources: []*anypb.Any{variant("prod"), variant("test")}}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if len(u.Resources) != 2 || keying.CanonicalConstraints(u.Resources[0].Constraints) != "env=prod" ||
		keying.CanonicalConstraints(u.Resources[1].Constraints) != "env=test" || u.Resources[0].Name != "r" {
		t.Fatalf("update %+v", u)
	}
	if ack := s.NextSotW(t, &cur, keying.ClusterType); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("not ACKed: %v", ack)
	}
}

// A full-state response to a TP2 key answers that key, not the plain name
// nobody subscribed on the stream: a relay that took the plain name as
// answered pruned its default variant, which the default servers had listed,
// since the response (the env=prod variant only) left it out (issue 23,
// item 5).
func TestSotWTP2KeyAnswersNotThePlainName(t *testing.T) {
	s, resp := startFake(t)
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	key := keying.SubscriptionKey("r", keying.CanonicalParams(map[string]string{"env": "prod"}))
	c.Subscribe(keying.ClusterType, key)
	cur, ucur := 0, 0
	s.NextSotW(t, &cur, keying.ClusterType)
	prod := wrapped(t, &discoveryv3.Resource{Resource: mustAny(t, cluster("r")),
		ResourceName: &discoveryv3.ResourceName{Name: "r", DynamicParameterConstraints: envIs("prod")}})
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{prod}}
	rec.nextUpdate(t, &ucur, keying.ClusterType)
	s.NextSotW(t, &cur, keying.ClusterType) // the ACK
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v2", Nonce: "n2", Resources: []*anypb.Any{prod}}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if _, ok := u.Keys[key]; !ok {
		t.Fatalf("keys %v lack the key answered, %s", u.Keys, key)
	}
	if _, ok := u.Keys["r"]; ok {
		t.Fatalf("keys %v: the plain name r counts as answered, but only %s was subscribed", u.Keys, key)
	}
}

// Once a TP2 key's subscription ends, a full-state response without its name
// deletes nothing: the stream no longer asks for the name, and the variant
// the default servers list of it, say, must stay (seed 5502 of the oracle).
// The plain name was reported removed: the name the key had answered stayed
// known after its unsubscription.
func TestSotWUnsubscribedTP2KeyRemovesNothing(t *testing.T) {
	s, resp := startFake(t)
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, s.Addr())
	key := keying.SubscriptionKey("r", keying.CanonicalParams(map[string]string{"env": "prod"}))
	c.Subscribe(keying.ClusterType, key, "other")
	cur, ucur := 0, 0
	s.NextSotW(t, &cur, keying.ClusterType)
	prod := wrapped(t, &discoveryv3.Resource{Resource: mustAny(t, cluster("r")),
		ResourceName: &discoveryv3.ResourceName{Name: "r", DynamicParameterConstraints: envIs("prod")}})
	other := mustAny(t, cluster("other"))
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{prod, other}}
	rec.nextUpdate(t, &ucur, keying.ClusterType)
	s.NextSotW(t, &cur, keying.ClusterType) // the ACK
	c.Unsubscribe(keying.ClusterType, key)
	s.NextSotW(t, &cur, keying.ClusterType) // other alone
	resp <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "v2", Nonce: "n2", Resources: []*anypb.Any{other}}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if slices.Contains(u.Removed, "r") {
		t.Fatalf("removed %v: r, whose key %s is no longer subscribed, counts as deleted", u.Removed, key)
	}
}

// A panic in the Handler applying a response (a bug of the relay) must not
// end the process: the response is NACKed like an invalid one, OnPanic
// counts it, and the stream keeps working — the next response is applied
// and ACKed on the same stream.
func TestHandlerPanicIsNACKed(t *testing.T) {
	for _, mode := range []upstream.Mode{upstream.ModeSotW, upstream.ModeDelta} {
		t.Run(map[upstream.Mode]string{upstream.ModeSotW: "sotw", upstream.ModeDelta: "delta"}[mode], func(t *testing.T) {
			f := &scriptedADS{sotw: make(chan *discoveryv3.DiscoveryResponse, 4), delta: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)}
			srv := xdstest.StartUpstream(t, xdstest.WithADS(f))
			rec := &recorder{}
			rec.setReject(func(u upstream.Update) error {
				if u.Event == upstream.Response && len(u.Resources) == 1 && u.Resources[0].Name == "c1" {
					panic("a bug applying c1")
				}
				return nil
			})
			panics := make(chan string, 4)
			c := newClientCfg(t, upstream.Config{Mode: mode, OnPanic: func(typeURL string) { panics <- typeURL }}, rec, srv.Addr())
			c.Subscribe(keying.ClusterType, "c1", "c2")
			cur := 0
			respond := func(nonce, name string) {
				if mode == upstream.ModeSotW {
					f.sotw <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: nonce, Nonce: nonce,
						Resources: []*anypb.Any{mustAny(t, cluster(name))}}
				} else {
					f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: nonce,
						Resources: []*discoveryv3.Resource{{Name: name, Version: nonce, Resource: mustAny(t, cluster(name))}}}
				}
			}
			next := func() xdstest.Request {
				return srv.NextRequest(t, &cur, "a CDS request", func(r xdstest.Request) bool {
					return r.SotW.GetTypeUrl() == keying.ClusterType || r.Delta.GetTypeUrl() == keying.ClusterType
				})
			}
			first := next()
			respond("1", "c1")
			if r := next(); r.SotW.GetErrorDetail() == nil && r.Delta.GetErrorDetail() == nil {
				t.Fatalf("the response whose update panicked was not NACKed: %v %v", r.SotW, r.Delta)
			}
			if typ := <-panics; typ != keying.ClusterType {
				t.Fatalf("OnPanic told %q, want %q", typ, keying.ClusterType)
			}
			respond("2", "c2")
			r := next()
			if r.SotW.GetErrorDetail() != nil || r.Delta.GetErrorDetail() != nil || r.StreamID != first.StreamID {
				t.Fatalf("the next response: %v %v on stream %d, want an ACK on stream %d", r.SotW, r.Delta, r.StreamID, first.StreamID)
			}
		})
	}
}
