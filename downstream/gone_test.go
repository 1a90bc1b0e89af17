package downstream

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
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

// fromElsewhereStream returns a SotW ADS stream past its reconnect's grace
// whose client came back holding r5 → c1 and brought its clusters (c1
// among them) from elsewhere: the stream sent it r5 from rds, and it
// subscribes to every cluster.
func fromElsewhereStream(t *testing.T, rds *View) (*stream, *recorder[*discoverypb.DiscoveryResponse]) {
	t.Helper()
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute) // the reconnect's grace is over
	for _, req := range []*discoverypb.DiscoveryRequest{
		{TypeUrl: keying.RouteType, ResourceNames: []string{"r5"}, VersionInfo: "v-elsewhere"},
		{TypeUrl: keying.ClusterType, ResourceNames: []string{"*"}, VersionInfo: "v-elsewhere"},
	} {
		if err := st.handleSotW(req); err != nil {
			t.Fatal(err)
		}
		if req.TypeUrl == keying.RouteType {
			st.Notify(rds, []string{"r5"})
			st.flush()
			if len(rec.sent) != 1 {
				t.Fatalf("%d responses, want r5's", len(rec.sent))
			}
		}
	}
	return st, rec
}

// clustersWithout returns a complete CDS View, received at, of c14 and the
// other names: c1 is gone.
func clustersWithout(t *testing.T, seq uint64, at time.Time, names ...string) *View {
	v := &View{TypeURL: keying.ClusterType, Seq: seq, Complete: true, Received: at, Resources: map[string]*Resource{}}
	for _, n := range append(names, "c14") {
		v.Resources[n] = resourceOf(t, n, &clusterv3.Cluster{Name: n})
	}
	return v
}

// graceOverStream returns a SotW stream of a server with opts whose
// reconnect grace is over, what it sent, and a function that makes it
// handle a request.
func graceOverStream(t *testing.T, opts Options) (*stream, *recorder[*discoverypb.DiscoveryResponse], func(typeURL, version string, names ...string)) {
	opts.Metrics = metrics.New()
	srv := NewServer(&deferredSource{}, opts)
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute)
	request := func(typeURL, version string, names ...string) {
		t.Helper()
		if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, VersionInfo: version}); err != nil {
			t.Fatal(err)
		}
	}
	return st, rec, request
}

// sentTypes returns the types of the responses sent after the first n.
func sentTypes(rec *recorder[*discoverypb.DiscoveryResponse], n int) []string {
	var out []string
	for _, r := range rec.sent[n:] {
		out = append(out, r.GetTypeUrl())
	}
	return out
}

// An upstream that sends type by type may send the move of a route off a
// cluster just after the CDS without it, long after the client came back:
// the clusters wait for the move (not only within the reconnect's grace).
func TestSotWBreakFirstFromElsewhereWaitsForTheMoveThatFollows(t *testing.T) {
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st, rec := fromElsewhereStream(t, rds1)
	st.Notify(clustersWithout(t, 2, time.Now()), []string{keying.Wildcard}) // the removal arrives now
	st.flush()
	if got := sentTypes(rec, 1); len(got) != 0 {
		t.Fatalf("sent %v before the move of r5 off c1, which the upstream sends next", got)
	}
	rds2 := rds1.Next(3, map[string]struct{}{"r5": {}})
	rds2.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c14"))}
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the move of r5, then the clusters", got)
	}
}

// An upstream whose routes keep referring to a cluster it deleted does not
// freeze the clusters of a client from elsewhere: once the wait from the
// removal is over they go, and so do later changes.
func TestSotWDanglingReferenceFromElsewhereDoesNotFreezeClusters(t *testing.T) {
	rds := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st, rec := fromElsewhereStream(t, rds)
	st.Notify(clustersWithout(t, 2, time.Now()), []string{keying.Wildcard})
	st.flush()
	// The stream looks again when the wait ends (its timer queues the
	// type); the flush is by hand here.
	for deadline := time.Now().Add(20 * time.Second); len(rec.sent) == 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the clusters never went while r5 keeps referring to c1")
		}
		st.flush()
	}
	st.Notify(clustersWithout(t, 3, time.Now(), "c15"), nil) // a later change
	st.flush()
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.ClusterType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the clusters, then their change", got)
	}
}

// While no live upstream confirms the relay's copy of the route the client
// holds (it reconnected and has not answered yet), the route may have moved
// off the cluster a CDS dropped long ago: the clusters wait for the
// upstream's answer on the route, and go once it keeps the route as it was.
func TestSotWClustersWaitWhileTheRouteIsDoubtful(t *testing.T) {
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st, rec := fromElsewhereStream(t, rds1)
	rds2 := rds1.Next(2, nil)
	rds2.Unconfirmed = map[string]bool{"": true} // the upstream went away
	st.Notify(rds2, nil)
	st.Notify(clustersWithout(t, 3, time.Now().Add(-time.Minute)), []string{keying.Wildcard})
	st.flush()
	if got := sentTypes(rec, 1); len(got) != 0 {
		t.Fatalf("sent %v while the relay's r5, which refers to c1, is unconfirmed", got)
	}
	st.Notify(rds1.Next(4, nil), nil) // confirmed again, unchanged: the upstream's own dangling reference
	st.flush()
	st.flush()
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.ClusterType}) {
		t.Fatalf("sent %v once r5 is confirmed, want the clusters", got)
	}
}

// A SotW client comes back holding l5 → r6 → c1 while the relay's upstream
// is away: the relay can read none of it, and c1 is not known gone, so the
// clusters wait. Longer than the relay waits for the upstream's word, the
// upstream answers: the CDS without c1 before the RDS that moves r6 off it.
// The clusters wait for the move: the wait for the upstream's word on r6
// runs from its word on c1, not from the start of the outage.
func TestSotWClustersFromElsewhereWaitForTheRouteAfterAnOutage(t *testing.T) {
	const wait = 200 * time.Millisecond
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New(), AnswerWait: wait})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DiscoveryResponse]{fresh: func() *discoverypb.DiscoveryResponse { return &discoverypb.DiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute) // the reconnect's grace is over
	unreachable := func(typeURL, name string) *View {
		return &View{TypeURL: typeURL, Seq: 1, Resources: map[string]*Resource{},
			Errors: map[string]*ResourceError{name: {Name: name, Code: codes.Unavailable, Message: "unreachable"}}}
	}
	for _, req := range []*discoverypb.DiscoveryRequest{
		{TypeUrl: keying.ListenerType, ResourceNames: []string{"l5"}, VersionInfo: "v-elsewhere"},
		{TypeUrl: keying.RouteType, ResourceNames: []string{"r6"}, VersionInfo: "v-elsewhere"},
		{TypeUrl: keying.ClusterType, ResourceNames: []string{"c1"}, VersionInfo: "v-elsewhere"},
	} {
		if err := st.handleSotW(req); err != nil {
			t.Fatal(err)
		}
		name := req.ResourceNames[0]
		st.Notify(unreachable(req.TypeUrl, name), []string{name})
		st.flush()
	}
	if got := sentTypes(rec, 0); !slices.Equal(got, []string{keying.RouteType}) {
		t.Fatalf("sent %v while the upstream is away, want r6's error only", got)
	}
	time.Sleep(2 * wait) // the upstream stays away

	st.Notify(clustersWithout(t, 2, time.Now()), nil) // c1 is gone
	st.Notify(&View{TypeURL: keying.ListenerType, Seq: 2, Resources: map[string]*Resource{"l5": resourceOf(t, "l5", listenerOf(t, "l5", "r6"))},
		Changed: map[string]struct{}{"l5": {}}}, nil)
	st.Notify(&View{TypeURL: keying.RouteType, Seq: 2, Resources: map[string]*Resource{"r6": resourceOf(t, "r6", routeTo("r6", "c14"))},
		Changed: map[string]struct{}{"r6": {}}}, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.ListenerType, keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want l5, the move of r6 off c1, then the clusters without c1", got)
	}
}

// listenerOf returns a proxyless gRPC listener that takes its routes from
// route by RDS.
func listenerOf(t *testing.T, name, route string) *listenerv3.Listener {
	t.Helper()
	m, err := anypb.New(&hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{
		Rds: &hcmv3.Rds{RouteConfigName: route}}})
	if err != nil {
		t.Fatal(err)
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: m}}
}

// A SotW Envoy came back holding l1 -> r5 -> c1 (a relay restart): the
// relay's copy of r5 is unsure, so the stream withholds it (no rollback) and
// cannot read the client's. The upstream is live, and the relay waits for
// its word on r5 (its silence confirms the copy only after two
// does-not-exist waits); on a loaded machine that takes longer than
// Options.AnswerWait. The clusters without c1 wait for that word, not for
// the clock: they went out once AnswerWait had passed, and the client held
// a route to a cluster it had been told was gone (oracle seed 160673). The
// word then comes queued behind a change of the clusters, naming nothing
// (the copy confirmed unchanged): the clusters wait until r5 is sent. Where
// the relay's copy is only stale (its upstream away), the wait stays
// bounded.
func TestSotWClustersWaitForTheWordOnAnUnsureRouteTheStreamCannotRead(t *testing.T) {
	for _, away := range []bool{false, true} {
		t.Run(map[bool]string{false: "unsure", true: "stale"}[away], func(t *testing.T) {
			testClustersWaitForTheWord(t, away)
		})
	}
}

func testClustersWaitForTheWord(t *testing.T, away bool) {
	st, rec, request := graceOverStream(t, Options{AnswerWait: time.Nanosecond})
	request(keying.ListenerType, "", "*")
	st.Notify(&View{TypeURL: keying.ListenerType, Seq: 1, Complete: true,
		Resources: map[string]*Resource{"l1": resourceOf(t, "l1", listenerOf(t, "l1", "r5"))}}, []string{keying.Wildcard})
	request(keying.RouteType, "v-elsewhere", "r5") // it holds r5 -> c1
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Unsure: map[string]struct{}{"r5": {}},
		Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	if away {
		rds1.Unsure, rds1.Unconfirmed = nil, map[string]bool{"": true}
	}
	st.Notify(rds1, []string{"r5"})
	request(keying.ClusterType, "v-elsewhere", "*") // it holds c1
	st.Notify(clustersWithout(t, 1, time.Now().Add(-time.Minute)), []string{keying.Wildcard})
	st.flush()
	got := sentTypes(rec, 0)
	if away {
		if !slices.Equal(got, []string{keying.ListenerType, keying.ClusterType}) {
			t.Fatalf("sent %v, want the listeners, then the clusters once AnswerWait passed (the upstream is away)", got)
		}
		return
	}
	if !slices.Equal(got, []string{keying.ListenerType}) {
		t.Fatalf("sent %v, want only the listeners while the relay waits for its upstream's word on r5", got)
	}

	st.Notify(clustersWithout(t, 2, time.Now().Add(-time.Minute), "c9"), nil)
	rds2 := rds1.Next(2, nil)
	rds2.Unsure = nil // the upstream's word: r5 as it was
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want r5, then the clusters", got)
	}
	cds := rec.sent[len(rec.sent)-1]
	var names []string
	for _, a := range cds.GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"c14", "c9"}) {
		t.Fatalf("clusters %v, want c14 and c9 (r5 -> c1, now sent, is the upstream's own reference)", names)
	}
}

// A SotW Envoy came back holding r5 → c1, which its listener names; the
// relay's copy of r5 is unsure, so the stream withholds it (no rollback)
// and cannot read what the client's r5 refers to. The upstream then breaks
// first: the CDS without c1, then the RDS that confirms r5 moved to c14,
// both queued before the stream looks, after the relay's wait for the
// upstream's word is over (a relay busy for seconds on a loaded machine).
// The clusters wait for the queued route: they went out first, and the
// client held a route to a cluster it had been told was gone.
func TestSotWClustersWaitForTheQueuedAnswerOnARouteTheStreamCannotRead(t *testing.T) {
	st, rec, request := graceOverStream(t, Options{AnswerWait: time.Nanosecond})
	request(keying.ListenerType, "", "*")
	lds := &View{TypeURL: keying.ListenerType, Seq: 1, Complete: true,
		Resources: map[string]*Resource{"l1": resourceOf(t, "l1", listenerOf(t, "l1", "r5"))}}
	st.Notify(lds, []string{keying.Wildcard})
	request(keying.RouteType, "v-elsewhere", "r5") // it holds r5 → c1
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Unsure: map[string]struct{}{"r5": {}},
		Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st.Notify(rds1, []string{"r5"})
	request(keying.ClusterType, "v-elsewhere", "*") // it holds c1
	st.flush()
	if got := sentTypes(rec, 0); !slices.Equal(got, []string{keying.ListenerType}) {
		t.Fatalf("sent %v, want only the listeners (r5 withheld while unsure, the clusters while r5 is unread)", got)
	}

	st.Notify(clustersWithout(t, 2, time.Now()), nil)
	rds2 := rds1.Next(2, map[string]struct{}{"r5": {}})
	rds2.Unsure = nil // the upstream's word on r5
	rds2.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c14"))}
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 1); !slices.Equal(got, []string{keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the move of r5 to c14, then the clusters without c1", got)
	}
}

// As above, but the upstream's CDS without c1 comes long after the stream
// first found r5 unreadable, and its RDS that moves r5 comes a moment
// after that: the clusters wait a short while from the removal for the
// move that follows, as they do for a route the stream can read. They went
// at once: the wait ran from the stream's first look only.
func TestSotWClustersWaitForTheMoveAfterARemovalWhenTheRouteIsUnread(t *testing.T) {
	st, rec, request := graceOverStream(t, Options{AnswerWait: time.Nanosecond})
	request(keying.ListenerType, "", "*")
	st.Notify(&View{TypeURL: keying.ListenerType, Seq: 1, Complete: true,
		Resources: map[string]*Resource{"l1": resourceOf(t, "l1", listenerOf(t, "l1", "r5"))}}, []string{keying.Wildcard})
	request(keying.RouteType, "v-elsewhere", "r5") // it holds r5 → c1
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Unsure: map[string]struct{}{"r5": {}},
		Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st.Notify(rds1, []string{"r5"})
	request(keying.ClusterType, "", "*")
	cds1 := clustersWithout(t, 1, time.Now().Add(-time.Minute), "c1")
	st.Notify(cds1, []string{keying.Wildcard})
	st.flush()
	if got := sentTypes(rec, 0); !slices.Equal(got, []string{keying.ListenerType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the listeners and the clusters c1, c14 (r5 withheld while unsure)", got)
	}

	cds2 := clustersWithout(t, 2, time.Now()) // the removal of c1 arrives now
	cds2.Changed = map[string]struct{}{"c1": {}}
	st.Notify(cds2, nil)
	st.flush()
	if got := sentTypes(rec, 2); len(got) != 0 {
		t.Fatalf("sent %v at once, before the move of r5 the upstream sends next", got)
	}
	rds2 := rds1.Next(2, map[string]struct{}{"r5": {}})
	rds2.Unsure = nil
	rds2.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c14"))}
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 2); !slices.Equal(got, []string{keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the move of r5 to c14, then the clusters without c1", got)
	}
}

// A SotW Envoy came back holding l1 → r5 → c1; the stream sent it l1 and r5
// but never c1 (from elsewhere). The upstream removes all three, the CDS
// first, its RDS and LDS a moment later, and all of it is queued before the
// stream looks, long after the CDS arrived (a client slow to acknowledge):
// the clusters wait while the removal of r5, or a change of the listeners,
// is queued, so the client drops l1, and with it r5, before it is told c1 is
// gone. They went first: the removal of a referrer did not count as its
// move.
func TestSotWClustersWaitForTheQueuedRemovalOfTheirRoute(t *testing.T) {
	st, rec, request := graceOverStream(t, Options{AnswerWait: time.Minute})
	request(keying.ListenerType, "", "*")
	lds1 := &View{TypeURL: keying.ListenerType, Seq: 1, Complete: true,
		Resources: map[string]*Resource{"l1": resourceOf(t, "l1", listenerOf(t, "l1", "r5"))}}
	st.Notify(lds1, []string{keying.Wildcard})
	request(keying.RouteType, "", "r5")
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st.Notify(rds1, []string{"r5"})
	st.flush()
	if got := sentTypes(rec, 0); !slices.Equal(got, []string{keying.ListenerType, keying.RouteType}) {
		t.Fatalf("sent %v, want l1 and r5", got)
	}

	request(keying.ClusterType, "v-elsewhere", "*") // it holds c1
	st.Notify(clustersWithout(t, 2, time.Now().Add(-time.Minute)), []string{keying.Wildcard})
	rds2 := rds1.Next(2, map[string]struct{}{"r5": {}})
	rds2.Resources = map[string]*Resource{}
	st.Notify(rds2, nil)
	lds2 := lds1.Next(2, map[string]struct{}{"l1": {}})
	lds2.Resources = map[string]*Resource{}
	st.Notify(lds2, nil)
	st.flush()
	st.flush() // (what a recheck queued)
	if got := sentTypes(rec, 2); !slices.Equal(got, []string{keying.ListenerType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the listeners without l1, then the clusters without c1", got)
	}
}

// As above, with an upstream whose snapshots hold tens of thousands of
// names: its RDS that moves r5 comes seconds after its CDS without c1, and
// another CDS comes between them. The clusters wait Options.MoveWait from
// the removal, not from the latest CDS: they went once a second had
// passed.
func TestSotWClustersWaitMoveWaitAfterARemovalWhenTheRouteIsUnread(t *testing.T) {
	st, rec, request := graceOverStream(t, Options{AnswerWait: time.Nanosecond, MoveWait: time.Minute})
	request(keying.ListenerType, "", "*")
	st.Notify(&View{TypeURL: keying.ListenerType, Seq: 1, Complete: true,
		Resources: map[string]*Resource{"l1": resourceOf(t, "l1", listenerOf(t, "l1", "r5"))}}, []string{keying.Wildcard})
	request(keying.RouteType, "v-elsewhere", "r5") // it holds r5 → c1
	rds1 := &View{TypeURL: keying.RouteType, Seq: 1, Unsure: map[string]struct{}{"r5": {}},
		Resources: map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}}
	st.Notify(rds1, []string{"r5"})
	request(keying.ClusterType, "", "*")
	st.Notify(clustersWithout(t, 1, time.Now().Add(-time.Minute), "c1"), []string{keying.Wildcard})
	st.flush()
	if got := sentTypes(rec, 0); !slices.Equal(got, []string{keying.ListenerType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the listeners and the clusters c1, c14 (r5 withheld while unsure)", got)
	}

	cds2 := clustersWithout(t, 2, time.Now().Add(-2*time.Second)) // the removal of c1, two seconds ago
	cds2.Changed = map[string]struct{}{"c1": {}}
	st.Notify(cds2, nil)
	st.flush()
	if got := sentTypes(rec, 2); len(got) != 0 {
		t.Fatalf("sent %v two seconds after the removal, before the move of r5 the upstream sends next", got)
	}
	cds3 := clustersWithout(t, 3, time.Now(), "c15")
	cds3.Changed = map[string]struct{}{"c15": {}}
	st.Notify(cds3, nil)
	st.flush()
	if got := sentTypes(rec, 2); len(got) != 0 {
		t.Fatalf("sent %v with the next CDS, before the move of r5 the upstream sends next", got)
	}
	rds2 := rds1.Next(2, map[string]struct{}{"r5": {}})
	rds2.Unsure = nil
	rds2.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c14"))}
	st.Notify(rds2, nil)
	st.flush()
	st.flush() // (what the route's response released)
	if got := sentTypes(rec, 2); !slices.Equal(got, []string{keying.RouteType, keying.ClusterType}) {
		t.Fatalf("sent %v, want the move of r5 to c14, then the clusters without c1", got)
	}
}
