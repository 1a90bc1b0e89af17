package downstream

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// resourceOf returns m as a View's resource.
func resourceOf(t *testing.T, name string, m proto.Message) *Resource {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return &Resource{Name: name, Version: ResourceVersion(b), Any: b}
}

func routeTo(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"},
		Routes: []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}}}}}}
}

// A route deleted upstream stays with a SotW client while it subscribes to
// it (SotW cannot remove a route); a response that leaves it out (another
// route changed) must not make the stream forget it: the cluster it refers
// to is not removed before the client drops the route (the oracle: a CDS
// full state without the cluster went out while the client still held the
// route — its listener's removal came later).
func TestSotWDeletedRouteStillHeldByTheClient(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	last := map[string]*discoverypb.DiscoveryResponse{}
	request := func(typeURL string, names ...string) {
		t.Helper()
		r := last[typeURL]
		if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names,
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(v *View, force []string) *discoverypb.DiscoveryResponse {
		t.Helper()
		n := len(rec.sent)
		st.Notify(v, force)
		st.flush()
		if len(rec.sent) == n {
			return nil
		}
		resp := rec.sent[len(rec.sent)-1]
		last[resp.GetTypeUrl()] = resp
		return resp
	}
	c1, c2, c8 := resourceOf(t, "c1", &clusterv3.Cluster{Name: "c1"}), resourceOf(t, "c2", &clusterv3.Cluster{Name: "c2"}),
		resourceOf(t, "c8", &clusterv3.Cluster{Name: "c8"})
	cds1 := &View{TypeURL: keying.ClusterType, Seq: 1, Complete: true, Resources: map[string]*Resource{"c1": c1, "c2": c2}}
	rds1 := &View{TypeURL: keying.RouteType, Seq: 2, Resources: map[string]*Resource{
		"r5": resourceOf(t, "r5", routeTo("r5", "c1")), "r7": resourceOf(t, "r7", routeTo("r7", "c2"))}}
	request(keying.ClusterType, "*")
	deliver(cds1, []string{keying.Wildcard})
	request(keying.ClusterType, "*") // ACK
	request(keying.RouteType, "r5", "r7")
	deliver(rds1, []string{"r5", "r7"})
	request(keying.RouteType, "r5", "r7") // ACK

	// r5 is deleted and r7 moves to c8; then c1 goes and c8 comes.
	rds2 := rds1.Next(3, map[string]struct{}{"r5": {}, "r7": {}})
	rds2.Resources = map[string]*Resource{"r7": resourceOf(t, "r7", routeTo("r7", "c8"))}
	if resp := deliver(rds2, nil); resp == nil || len(resp.GetResources()) != 1 {
		t.Fatal("the change of r7 was not sent")
	}
	cds2 := cds1.Next(4, map[string]struct{}{"c1": {}, "c8": {}})
	cds2.Resources = map[string]*Resource{"c2": c2, "c8": c8}
	clusters := func(resp *discoverypb.DiscoveryResponse) map[string]bool {
		out := map[string]bool{}
		for _, a := range resp.GetResources() {
			c := &clusterv3.Cluster{}
			if err := a.UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			out[c.GetName()] = true
		}
		return out
	}
	if resp := deliver(cds2, nil); resp != nil && !clusters(resp)["c1"] {
		t.Fatal("c1 removed while the client still holds r5, which refers to it")
	}
	// The client drops r5 (its listener went): now c1 may go.
	request(keying.ClusterType, "*")
	request(keying.RouteType, "r7")
	st.flush()
	var resp *discoverypb.DiscoveryResponse
	for _, r := range rec.sent {
		if r.GetTypeUrl() == keying.ClusterType {
			resp = r
		}
	}
	if clusters(resp)["c1"] || !clusters(resp)["c8"] {
		t.Fatalf("after r5 was dropped the client holds clusters %v, want c2 and c8", clusters(resp))
	}
}

// View.Known: the upstream's word (Absent, Complete) answers every client;
// what is only unfound — known from its silence — answers only a client that
// holds nothing of it, never one it would tell that something it holds is
// gone (issue 23, items 3 and 4).
func TestKnownSilenceIsNotTheWord(t *testing.T) {
	v := &View{Absent: map[string]struct{}{"a": {}}, Unfound: map[string]struct{}{"u": {}, keying.Wildcard: {}}}
	for _, c := range []struct {
		key         string
		holds, want bool
	}{
		{"a", true, true}, {"a", false, true},
		{"u", true, false}, {"u", false, true},
		{"x", true, false}, {"x", false, false},
		{keying.Wildcard, true, false}, {keying.Wildcard, false, true},
	} {
		if got := v.Known(c.key, c.holds); got != c.want {
			t.Errorf("Known(%q, holds %v) = %v, want %v", c.key, c.holds, got, c.want)
		}
		if got := v.Gone(c.key); got != (c.key == "a") && c.key != keying.Wildcard {
			t.Errorf("Gone(%q) = %v: only the upstream's word is gone", c.key, got)
		}
	}
	v.Complete = true // the upstream's word on the whole set
	if !v.Known(keying.Wildcard, true) || !v.Known("x", true) {
		t.Error("the complete wildcard set answers a client that holds config")
	}
}

// Make before break when the upstream breaks first (a snapshot's CDS, without
// c1, before its RDS that moves r5 to c14) for a SotW client that came back
// holding c1 from elsewhere, past the reconnect's grace: the stream cannot
// keep c1 (it never sent it), but the move of r5 is already queued behind
// the CDS, so the CDS waits for it. It went out at once without c1 while the
// client still held r5 → c1.
func TestSotWBreakFirstFromElsewhereWaitsForTheQueuedMove(t *testing.T) {
	src := &deferredSource{}
	srv := NewServer(src, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute) // the reconnect's grace is over
	request := func(typeURL, version string, names ...string) {
		t.Helper()
		if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, VersionInfo: version}); err != nil {
			t.Fatal(err)
		}
	}
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	request(keying.RouteType, "v-elsewhere", "r5")
	st.Notify(rds1, []string{"r5"})
	st.flush()
	if len(rec.sent) != 1 {
		t.Fatalf("%d responses, want r5's", len(rec.sent))
	}

	request(keying.ClusterType, "v-elsewhere", "*") // it holds c1
	cds := &View{TypeURL: keying.ClusterType, Seq: 2, Complete: true,
		Resources: map[string]*Resource{"c14": resourceOf(t, "c14", &clusterv3.Cluster{Name: "c14"})}}
	st.Notify(cds, []string{keying.Wildcard})
	rds2 := rds1.Next(3, map[string]struct{}{"r5": {}})
	rds2.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c14"))}
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	movedAt := -1
	for i, resp := range rec.sent[1:] {
		switch resp.GetTypeUrl() {
		case keying.RouteType:
			movedAt = i
		case keying.ClusterType:
			if movedAt < 0 {
				t.Fatal("the clusters without c1 went out before the move of r5, which refers to it")
			}
			return
		}
	}
	t.Fatalf("the clusters were never sent (the move of r5 sent: %v)", movedAt >= 0)
}
