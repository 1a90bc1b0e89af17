package downstream

import (
	"fmt"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
			case resp := <-st.ss.(*chanRecorder).sent:
				t.Fatalf("sent %s while the routes that refer to the clusters are unconfirmed", resp.GetTypeUrl())
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

// manyRoutesFromElsewhere returns a SotW ADS stream, flushed by the
// server's sender pool, past its reconnect's grace, whose client came back
// holding 10,001 routes, r%05d → c%05d, and its clusters from elsewhere:
// the stream sent it the routes of rds, and it subscribes to every cluster.
// next returns the next response, failing the test after largeWait and the
// removal's grace.
func manyRoutesFromElsewhere(t *testing.T) (st *stream, rds *View, next func(what string) *discoverypb.DiscoveryResponse) {
	t.Helper()
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New(), AnswerWait: 31 * time.Second})
	t.Cleanup(srv.Close)
	sent := make(chan *discoverypb.DiscoveryResponse, 8)
	st = &stream{srv: srv, ss: &chanRecorder{sent: sent}, proto: "sotw", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	st.graceUntil = time.Now().Add(-time.Minute) // the reconnect's grace is over
	t.Cleanup(func() { st.mu.Lock(); st.closed = true; st.mu.Unlock() })
	next = func(what string) *discoverypb.DiscoveryResponse {
		t.Helper()
		select {
		case resp := <-sent:
			return resp
		case <-time.After(largeWait + referrerGrace):
			t.Fatalf("%s: no response for %v", what, largeWait+referrerGrace)
			return nil
		}
	}
	rds = &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{}}
	routes := make([]string, largeWorld)
	for i := range routes {
		routes[i] = fmt.Sprintf("r%05d", i)
		rds.Resources[routes[i]] = resourceOf(t, routes[i], routeTo(routes[i], fmt.Sprintf("c%05d", i)))
	}
	request := func(req *discoverypb.DiscoveryRequest) {
		t.Helper()
		if err := st.handleSotW(req); err != nil {
			t.Fatal(err)
		}
	}
	request(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: routes, VersionInfo: "v-elsewhere"})
	request(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"*"}, VersionInfo: "v-elsewhere"})
	st.Notify(rds, routes)
	resp := next("the routes")
	request(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: routes,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	return st, rds, next
}

// chanRecorder is a SotW stream's client that passes on every response.
type chanRecorder struct {
	recorder[*discoverypb.DiscoveryResponse]
	sent chan *discoverypb.DiscoveryResponse
}

func (r *chanRecorder) SendMsg(m any) error {
	e := m.(*encoded)
	resp := &discoverypb.DiscoveryResponse{}
	if err := proto.Unmarshal(append(append([]byte{}, e.body...), e.nonce...), resp); err != nil {
		return err
	}
	r.sent <- resp
	return nil
}
