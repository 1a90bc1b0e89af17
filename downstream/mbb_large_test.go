package downstream

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// largeWorld is the number of names of the large tests: more than 10,000.
const largeWorld = 10_001

// largeWait bounds each step of the large tests: far more than the linear
// work a step needs, far less than work per name times names.
const largeWait = 10 * time.Second

// A SotW client that moved in holding 10,001 clusters, each named by one
// of the 10,001 routes the stream sent it, while the relay's clusters lack
// them: make before break holds the clusters whole while no live upstream
// confirms the routes (TestSotWClustersWaitWhileTheRouteIsDoubtful), and
// sends them once it does. A look at the clusters must not ask, for each
// cluster it cannot read, which route the client holds refers to it; nor
// must the looks again when the removal's grace ends come once per
// cluster, each going over every cluster withheld.
func TestSotWManyClustersFromElsewhereWaitForDoubtfulRoutes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		removed time.Duration // when the removal arrived, from now
		quiet   time.Duration // how long no response comes before the routes are confirmed
	}{
		{"removed long ago", -time.Minute, referrerGrace / 4},
		{"confirmed past the grace", 0, 2 * referrerGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, rds, next := manyRoutesFromElsewhere(t)
			doubtful := rds.Next(rds.Seq+1, nil)
			doubtful.Unconfirmed = map[string]bool{"": true} // the upstream went away
			st.Notify(doubtful, nil)
			st.Notify(clustersWithout(t, rds.Seq+2, time.Now().Add(tc.removed)), []string{keying.Wildcard})
			select {
			case e := <-st.ss.(*chanRecorder).sent:
				t.Fatalf("sent %s while the routes that refer to the clusters are unconfirmed", decoded(t, e).GetTypeUrl())
			case <-time.After(tc.quiet):
			}
			start := time.Now()
			st.Notify(rds.Next(rds.Seq+3, nil), nil) // confirmed again, unchanged
			if resp := next("the clusters once the routes are confirmed"); resp.GetTypeUrl() != keying.ClusterType || len(resp.GetResources()) != 1 {
				t.Fatalf("sent %d %s, want the clusters without those deleted", len(resp.GetResources()), resp.GetTypeUrl())
			}
			if took := time.Since(start); took > largeWait {
				t.Fatalf("the clusters took %v once the routes were confirmed (bound %v)", took.Round(time.Millisecond), largeWait)
			}
		})
	}
}

// The same client when the upstream deleted the clusters and its routes
// keep naming them (its own dangling references): the clusters go once the
// wait from the removal is over
// (TestSotWDanglingReferenceFromElsewhereDoesNotFreezeClusters).
func TestSotWManyDanglingReferencesFromElsewhere(t *testing.T) {
	st, rds, next := manyRoutesFromElsewhere(t)
	st.Notify(clustersWithout(t, rds.Seq+1, time.Now()), []string{keying.Wildcard}) // the removal arrives now
	if resp := next("the clusters after the wait"); resp.GetTypeUrl() != keying.ClusterType || len(resp.GetResources()) != 1 {
		t.Fatalf("sent %d %s, want the clusters without those deleted", len(resp.GetResources()), resp.GetTypeUrl())
	}
}

// A SotW client that moved in holding 10,001 routes its listeners name
// (the stream sent it the listeners; it brought the routes, which the relay
// holds unconfirmed, so the stream cannot send them) and its clusters, while
// the relay's clusters lack those the routes name: the clusters wait for
// the routes (TestSotWCDSWaitsForARouteWithheldFromElsewhere), and go once
// the routes are confirmed and sent. Each route the stream cannot read must
// not have it read every listener the client holds.
func TestSotWManyRoutesFromElsewhereNamedByManyListeners(t *testing.T) {
	st, next := pooledStream(t)
	lds := &View{TypeURL: keying.ListenerType, Seq: 1, Complete: true, Resources: map[string]*Resource{}}
	rds := manyRoutes(t)
	routes := slices.Sorted(maps.Keys(rds.Resources))
	for i, r := range routes {
		l := fmt.Sprintf("l%05d", i)
		lds.Resources[l] = resourceOf(t, l, listenerOf(t, l, r))
	}
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.ListenerType})
	st.Notify(lds, []string{keying.Wildcard})
	st.ack(t, next("the listeners"), nil)
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: routes, VersionInfo: "v-elsewhere"})
	doubtful := rds.Next(2, nil)
	doubtful.Unconfirmed = map[string]bool{"": true}
	st.Notify(doubtful, routes)
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"*"}, VersionInfo: "v-elsewhere"})
	st.Notify(clustersWithout(t, 3, time.Now().Add(-time.Minute)), []string{keying.Wildcard})
	select {
	case e := <-st.ss.(*chanRecorder).sent:
		t.Fatalf("sent %s while the client's routes are unconfirmed", decoded(t, e).GetTypeUrl())
	case <-time.After(referrerGrace / 4):
	}

	start := time.Now()
	st.Notify(rds.Next(4, nil), nil) // confirmed again, unchanged
	st.ack(t, next("the routes once confirmed"), routes)
	if resp := next("the clusters once the routes are sent"); resp.GetTypeUrl() != keying.ClusterType || len(resp.GetResources()) != 1 {
		t.Fatalf("sent %d %s, want the clusters without those deleted", len(resp.GetResources()), resp.GetTypeUrl())
	}
	if took := time.Since(start); took > largeWait {
		t.Fatalf("the routes and clusters took %v once the routes were confirmed (bound %v)", took.Round(time.Millisecond), largeWait)
	}
}

// manyRoutesFromElsewhere returns a SotW ADS stream (pooledStream) whose
// client came back holding 10,001 routes, r%05d → c%05d, and its clusters
// from elsewhere: the stream sent it the routes of rds, and it subscribes
// to every cluster.
func manyRoutesFromElsewhere(t *testing.T) (st *stream, rds *View, next func(what string) *discoverypb.DiscoveryResponse) {
	t.Helper()
	st, next = pooledStream(t)
	rds = manyRoutes(t)
	routes := slices.Sorted(maps.Keys(rds.Resources))
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: routes, VersionInfo: "v-elsewhere"})
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"*"}, VersionInfo: "v-elsewhere"})
	st.Notify(rds, routes)
	st.ack(t, next("the routes"), routes)
	return st, rds, next
}

// manyRoutes returns a View of 10,001 routes, r%05d → c%05d.
func manyRoutes(t *testing.T) *View {
	rds := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{}}
	for i := range largeWorld {
		r := fmt.Sprintf("r%05d", i)
		rds.Resources[r] = resourceOf(t, r, routeTo(r, fmt.Sprintf("c%05d", i)))
	}
	return rds
}

// pooledStream returns a SotW ADS stream flushed by its server's sender
// pool, past its reconnect's grace. next returns its next response,
// failing the test after largeWait and a removal's grace.
func pooledStream(t *testing.T) (st *stream, next func(what string) *discoverypb.DiscoveryResponse) {
	t.Helper()
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New(), AnswerWait: 31 * time.Second})
	t.Cleanup(srv.Close)
	sent := make(chan *encoded, 8)
	st = &stream{srv: srv, ss: &chanRecorder{sent: sent}, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute) // the reconnect's grace is over
	t.Cleanup(func() { st.mu.Lock(); st.closed = true; st.mu.Unlock() })
	return st, func(what string) *discoverypb.DiscoveryResponse {
		t.Helper()
		select {
		case e := <-sent:
			return decoded(t, e)
		case <-time.After(largeWait + referrerGrace):
			t.Fatalf("%s: no response for %v", what, largeWait+referrerGrace)
			return nil
		}
	}
}

// request hands the stream its client's request.
func (st *stream) request(t *testing.T, req *discoverypb.DiscoveryRequest) {
	t.Helper()
	if err := st.handleSotW(req); err != nil {
		t.Fatal(err)
	}
}

// ack hands the stream its client's ACK of resp, subscribed to names.
func (st *stream) ack(t *testing.T, resp *discoverypb.DiscoveryResponse, names []string) {
	t.Helper()
	st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
}

// chanRecorder is a SotW stream's client that passes on every response as
// sent (decoded by decoded).
type chanRecorder struct {
	recorder[*discoverypb.DiscoveryResponse]
	sent chan *encoded
}

func (r *chanRecorder) SendMsg(m any) error {
	r.sent <- m.(*encoded)
	return nil
}

// decoded returns the response e.
func decoded(t *testing.T, e *encoded) *discoverypb.DiscoveryResponse {
	t.Helper()
	resp := &discoverypb.DiscoveryResponse{}
	if err := proto.Unmarshal(append(append([]byte{}, e.body...), e.nonce...), resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// Proxyless gRPC clients that each subscribe to 10,001 endpoints by xdstp
// name while no upstream server is reachable each get the relay's 10,001
// UNAVAILABLE errors. The name of a response in the View's memo must not
// be built error by error, each copying all the names before it.
func TestSotWManyErrorsReachEveryClient(t *testing.T) {
	const clients = 8
	names := make([]string, largeWorld)
	eds := &View{TypeURL: keying.EndpointType, Seq: 1, Resources: map[string]*Resource{}, Errors: map[string]*ResourceError{}}
	for i := range names {
		names[i] = fmt.Sprintf("xdstp://authority.example/envoy.config.endpoint.v3.ClusterLoadAssignment/service-%05d", i)
		eds.Errors[names[i]] = &ResourceError{Name: names[i], Code: codes.Unavailable, Message: "unreachable"}
	}
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New()})
	t.Cleanup(srv.Close)
	sent := make(chan *encoded, clients)
	var streams []*stream
	for range clients {
		st := &stream{srv: srv, ss: &chanRecorder{sent: sent}, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
		t.Cleanup(func() { st.mu.Lock(); st.closed = true; st.mu.Unlock() })
		st.request(t, &discoverypb.DiscoveryRequest{TypeUrl: keying.EndpointType, ResourceNames: names})
		streams = append(streams, st)
	}
	start := time.Now()
	for _, st := range streams {
		st.Notify(eds, names)
	}
	var got []*encoded
	for len(got) < clients {
		select {
		case e := <-sent:
			got = append(got, e)
		case <-time.After(time.Until(start.Add(largeWait))):
			t.Fatalf("%d of %d clients got their errors within %v", len(got), clients, largeWait)
		}
	}
	for i, e := range got {
		if n := len(decoded(t, e).GetResourceErrors()); n != largeWorld {
			t.Fatalf("client %d: %d errors, want %d", i, n, largeWorld)
		}
	}
}
