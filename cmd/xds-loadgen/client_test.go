package main

import (
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// These tests drive one client's protocol logic directly, without a network.

var unitSpec = fleet.Spec{Listeners: 1, Routes: 1, Clusters: 3, EndpointsPerCluster: 1}

func newTestClient(t *testing.T, mode Mode, nack bool) *client {
	t.Helper()
	e, err := NewEngine(Config{Target: "unused", Clients: 1, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return &client{e: e, nack: nack, st: newClientState(mode, fleet.ListenerName(0))}
}

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sotwResp builds a SotW response with resources i of kind k, created at created.
func sotwResp(t *testing.T, spec fleet.Spec, k fleet.Kind, version, nonce string, created time.Time, idx ...int) *discoveryv3.DiscoveryResponse {
	r := &discoveryv3.DiscoveryResponse{TypeUrl: k.TypeURL(), VersionInfo: version, Nonce: nonce}
	for _, i := range idx {
		r.Resources = append(r.Resources, anyOf(t, spec.Resource(k, i, created)))
	}
	return r
}

func deltaResp(t *testing.T, spec fleet.Spec, k fleet.Kind, nonce string, created time.Time, idx ...int) *discoveryv3.DeltaDiscoveryResponse {
	r := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: k.TypeURL(), Nonce: nonce}
	for _, i := range idx {
		r.Resources = append(r.Resources, &discoveryv3.Resource{Name: spec.Name(k, i), Version: "v" + nonce,
			Resource: anyOf(t, spec.Resource(k, i, created))})
	}
	return r
}

func reqSummary(r *discoveryv3.DiscoveryRequest) (fleet.Kind, []string) {
	k, _ := fleet.KindOf(r.GetTypeUrl())
	return k, r.GetResourceNames()
}

func TestEnvoySotw(t *testing.T) {
	c := newTestClient(t, ModeEnvoy, false)
	t0 := time.Unix(100, 0)
	if got := c.st.initialKinds(); !slices.Equal(got, []fleet.Kind{fleet.Clusters, fleet.Listeners}) {
		t.Fatalf("initial kinds %v", got)
	}
	if r := c.sotwRequest(fleet.Clusters); r.ResourceNames != nil || r.VersionInfo != "" {
		t.Fatalf("initial CDS request %v, want a legacy wildcard", r)
	}

	reqs := c.handleSotw(sotwResp(t, unitSpec, fleet.Clusters, "c1", "1", t0, 0, 1, 2), t0)
	if len(reqs) != 2 {
		t.Fatalf("after CDS: %d requests, want ACK + EDS", len(reqs))
	}
	if reqs[0].GetVersionInfo() != "c1" || reqs[0].GetResponseNonce() != "1" || reqs[0].GetErrorDetail() != nil || reqs[0].ResourceNames != nil {
		t.Errorf("CDS ACK %v", reqs[0])
	}
	if k, names := reqSummary(reqs[1]); k != fleet.Endpoints || !slices.Equal(names, []string{"cluster-0", "cluster-1", "cluster-2"}) {
		t.Errorf("EDS request %v %v", k, names)
	}
	reqs = c.handleSotw(sotwResp(t, unitSpec, fleet.Listeners, "l1", "2", t0, 0), t0)
	if k, names := reqSummary(reqs[1]); len(reqs) != 2 || k != fleet.Routes || !slices.Equal(names, []string{"route-0"}) {
		t.Fatalf("after LDS: %v", reqs)
	}
	c.handleSotw(sotwResp(t, unitSpec, fleet.Routes, "r1", "3", t0, 0), t0)
	c.handleSotw(sotwResp(t, unitSpec, fleet.Endpoints, "e1", "4", t0, 0, 1), t0)
	if !c.syncedAt.IsZero() {
		t.Fatal("synced with an endpoint missing")
	}
	t1 := t0.Add(time.Second)
	c.handleSotw(sotwResp(t, unitSpec, fleet.Endpoints, "e2", "5", t0, 2), t1)
	if !c.syncedAt.Equal(t1) || c.e.ctr.synced.Load() != 1 {
		t.Fatalf("not synced: syncedAt %v", c.syncedAt)
	}

	// A full-state CDS update: cluster-1 changed 30ms before receipt, cluster-2 deleted.
	t2 := t1.Add(time.Second)
	upd := sotwResp(t, unitSpec, fleet.Clusters, "c2", "6", t0, 0)
	upd.Resources = append(upd.Resources, anyOf(t, unitSpec.Cluster(1, t2.Add(-30*time.Millisecond))))
	reqs = c.handleSotw(upd, t2)
	if c.updates != 1 || c.e.prop.Count() != 1 {
		t.Fatalf("updates %d, propagation samples %d; want 1, 1", c.updates, c.e.prop.Count())
	}
	if got := c.e.prop.Max(); got != 30*time.Millisecond {
		t.Errorf("propagation %v, want 30ms", got)
	}
	if k, names := reqSummary(reqs[len(reqs)-1]); k != fleet.Endpoints || !slices.Equal(names, []string{"cluster-0", "cluster-1"}) {
		t.Errorf("after cluster-2 deletion: EDS request %v %v", k, names)
	}
	if _, ok := c.st.lookup(fleet.Endpoints, "cluster-2"); ok {
		t.Error("endpoints of a deleted cluster still known")
	}
	// The same bytes again are not an update.
	c.handleSotw(upd, t2)
	if c.updates != 1 {
		t.Errorf("unchanged resend counted: updates %d", c.updates)
	}
}

func TestSotwNACKAndWrapped(t *testing.T) {
	c := newTestClient(t, ModeEnvoy, true)
	t0 := time.Unix(100, 0)
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: fleet.Clusters.TypeURL(), VersionInfo: "c1", Nonce: "1"}
	// Wrapped in Resource (xds.config.supports-resource-in-sotw), plus a TTL heartbeat without a resource.
	resp.Resources = append(resp.Resources,
		anyOf(t, &discoveryv3.Resource{Name: "cluster-0", Resource: anyOf(t, unitSpec.Cluster(0, t0))}),
		anyOf(t, &discoveryv3.Resource{Name: "cluster-1"}))
	reqs := c.handleSotw(resp, t0)
	if reqs[0].GetErrorDetail() == nil || reqs[0].GetVersionInfo() != "" || reqs[0].GetResponseNonce() != "1" {
		t.Fatalf("NACK %v: want error_detail, no accepted version, nonce 1", reqs[0])
	}
	if c.e.ctr.nacks.Load() != 1 {
		t.Errorf("nacks %d", c.e.ctr.nacks.Load())
	}
	_, has0 := c.st.lookup(fleet.Clusters, "cluster-0")
	_, has1 := c.st.lookup(fleet.Clusters, "cluster-1")
	if !has0 || has1 {
		t.Error("wrapped resource not unwrapped, or heartbeat stored")
	}
	// A well-behaved client NACKs undecodable content.
	good := newTestClient(t, ModeEnvoy, false)
	bad := &discoveryv3.DiscoveryResponse{TypeUrl: fleet.Clusters.TypeURL(), VersionInfo: "c1", Nonce: "1",
		Resources: []*anypb.Any{{TypeUrl: fleet.Clusters.TypeURL(), Value: []byte{0x0a, 0x05, 'x'}}}}
	if reqs := good.handleSotw(bad, t0); reqs[0].GetErrorDetail() == nil {
		t.Error("malformed resource ACKed")
	}
	if reqs := good.handleSotw(&discoveryv3.DiscoveryResponse{TypeUrl: "type.googleapis.com/other"}, t0); reqs != nil {
		t.Errorf("unknown type answered: %v", reqs)
	}
}

func TestGRPCDelta(t *testing.T) {
	c := newTestClient(t, ModeGRPC, false)
	spec := unitSpec
	spec.Style = fleet.StyleGRPC
	t0 := time.Unix(100, 0)
	if got := c.st.initialKinds(); !slices.Equal(got, []fleet.Kind{fleet.Listeners}) {
		t.Fatalf("initial kinds %v", got)
	}
	step := func(r *discoveryv3.DeltaDiscoveryResponse, wantKind fleet.Kind, wantSub, wantUnsub []string) {
		t.Helper()
		reqs := c.handleDelta(r, t0)
		if reqs[0].GetResponseNonce() != r.GetNonce() || reqs[0].GetErrorDetail() != nil {
			t.Fatalf("ACK %v", reqs[0])
		}
		if wantSub == nil && wantUnsub == nil {
			if len(reqs) != 1 {
				t.Fatalf("unexpected subscription changes %v", reqs[1:])
			}
			return
		}
		if len(reqs) < 2 {
			t.Fatalf("no subscription change after %v", r.GetTypeUrl())
		}
		got := reqs[1]
		if k, _ := fleet.KindOf(got.GetTypeUrl()); k != wantKind || !slices.Equal(got.GetResourceNamesSubscribe(), wantSub) ||
			!slices.Equal(got.GetResourceNamesUnsubscribe(), wantUnsub) {
			t.Fatalf("subscription change %v, want %v +%v -%v", got, wantKind, wantSub, wantUnsub)
		}
	}
	step(deltaResp(t, spec, fleet.Listeners, "1", t0, 0), fleet.Routes, []string{"route-0"}, nil)
	step(deltaResp(t, spec, fleet.Routes, "2", t0, 0), fleet.Clusters, []string{"cluster-0", "cluster-1", "cluster-2"}, nil)
	step(deltaResp(t, spec, fleet.Clusters, "3", t0, 0, 1, 2), fleet.Endpoints, []string{"cluster-0", "cluster-1", "cluster-2"}, nil)
	step(deltaResp(t, spec, fleet.Endpoints, "4", t0, 0, 1, 2), 0, nil, nil)
	if c.syncedAt.IsZero() {
		t.Fatal("not synced")
	}
	if got := c.st.initialVersions(fleet.Endpoints); len(got) != 3 || got["cluster-1"] != "v4" {
		t.Errorf("initial versions %v", got)
	}
	// The route configuration is removed: everything below it is unsubscribed.
	reqs := c.handleDelta(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: fleet.Routes.TypeURL(), Nonce: "5",
		RemovedResources: []string{"route-0"}}, t0)
	if len(reqs) != 3 {
		t.Fatalf("after route removal %d requests, want ACK + CDS + EDS unsubscriptions", len(reqs))
	}
	for _, r := range reqs[1:] {
		if len(r.GetResourceNamesUnsubscribe()) != 3 || len(r.GetResourceNamesSubscribe()) != 0 {
			t.Errorf("unsubscription %v", r)
		}
	}
	if c.st.synced() {
		t.Error("still synced without its route configuration")
	}
}

func TestStateStreamReset(t *testing.T) {
	s := newClientState(ModeGRPC, "l")
	s.types[fleet.Listeners].nonce, s.types[fleet.Listeners].requested = "7", true
	s.streamReset()
	if s.types[fleet.Listeners].nonce != "" || s.types[fleet.Listeners].requested {
		t.Error("per-stream state survived a reset")
	}
	if got := s.names(fleet.Listeners); !slices.Equal(got, []string{"l"}) {
		t.Errorf("names %v", got)
	}
}

func TestDecode(t *testing.T) {
	for _, style := range []fleet.Style{fleet.StyleEnvoy, fleet.StyleGRPC} {
		spec := fleet.Spec{Listeners: 3, Routes: 2, Clusters: 5, EndpointsPerCluster: 1, Style: style}
		created := time.Unix(7, 8)
		wantRefs := map[fleet.Kind]func(i int) []string{
			fleet.Listeners: func(i int) []string { return []string{fleet.RouteName(i % 2)} },
			fleet.Routes: func(j int) []string {
				if j == 0 {
					return []string{"cluster-0", "cluster-2", "cluster-4"}
				}
				return []string{"cluster-1", "cluster-3"}
			},
			fleet.Clusters:  func(k int) []string { return []string{fleet.ClusterName(k)} },
			fleet.Endpoints: func(int) []string { return nil },
		}
		for _, k := range fleet.Kinds {
			for i := range spec.Count(k) {
				b, err := proto.Marshal(spec.Resource(k, i, created))
				if err != nil {
					t.Fatal(err)
				}
				if n, ok := peekName(b); !ok || string(n) != spec.Name(k, i) {
					t.Errorf("peekName(%v %d) = %q, %v", k, i, n, ok)
				}
				name, refs, stamp, err := decodeResource(k, b)
				if err != nil || name != spec.Name(k, i) || stamp != created.UnixNano() || !slices.Equal(refs, wantRefs[k](i)) {
					t.Errorf("%s %v %d: decode = %q %v %d %v", style, k, i, name, refs, stamp, err)
				}
			}
		}
	}
	if _, ok := peekName([]byte{0xff}); ok {
		t.Error("peekName accepted garbage")
	}
	if _, _, _, err := decodeResource(fleet.Listeners, []byte{0x0a, 0x09}); err == nil {
		t.Error("decodeResource accepted a truncated listener")
	}
}
