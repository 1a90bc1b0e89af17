package upstream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// A new stream started to ask the Delta server about a name (Resync) is owed
// the answer to its first request: the server answers each name it declares.
// While a server slow to send it (behind a large response) has not, no
// other new stream asks again — it would ask the same and wait as long, and
// a relay that started one every ResyncAfter never heard an answer; the
// name that came into doubt meanwhile is not found yet. Once the server
// answers, a new stream asks about it.
func TestResyncWaitsForTheAnswerItIsOwed(t *testing.T) {
	const resyncAfter = 100 * time.Millisecond
	f := &scriptedADS{delta: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)} // answers when the test says
	srv := xdstest.StartUpstream(t, xdstest.WithADS(f))
	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeDelta, ResyncAfter: resyncAfter}, rec, srv.Addr())
	cur, scur, ucur := 0, 0, 0
	c.Subscribe(keying.ListenerType, "l6")
	srv.NextDelta(t, &cur, keying.ListenerType)
	rec.nextState(t, &scur, srv.Addr(), true)
	firstOf := func(stream int64) *discoveryv3.DeltaDiscoveryRequest {
		return srv.NextRequest(t, &cur, "a new stream's first request", func(r xdstest.Request) bool {
			return r.StreamID > stream && r.Delta != nil && r.Delta.GetTypeUrl() == keying.ListenerType && r.Delta.GetResponseNonce() == ""
		}).Delta
	}
	if !c.Resync(keying.ListenerType, "l6") {
		t.Fatal("Resync(l6) = false")
	}
	if req := firstOf(1); req.GetInitialResourceVersions()["l6"] == "" {
		t.Fatalf("the new stream's first request = %v, want l6 declared", req)
	}

	c.Subscribe(keying.ListenerType, "x")
	srv.NextDelta(t, &cur, keying.ListenerType)
	asked := c.Resync(keying.ListenerType, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 5*resyncAfter)
	defer cancel()
	if srv.Wait(ctx, func(s xdstest.Stats) bool { return s.TotalStreams > 2 }) == nil || asked {
		t.Fatalf("Resync(x) = %v, and a third stream started while the second still awaits the answer owed to its first request", asked)
	}

	f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ListenerType, SystemVersionInfo: "1", Nonce: "1",
		RemovedResources: []string{"l6"}}
	for !slices.Contains(rec.nextUpdate(t, &ucur, keying.ListenerType).Removed, "l6") {
	}
	if req := firstOf(2); req.GetInitialResourceVersions()["x"] == "" {
		t.Fatalf("the stream after the answer: first request %v, want x declared", req)
	}
}

// A server that never sends the answer owed to a new stream's first request
// (stuck on that stream) holds the next new stream back only for a while:
// the name that came into doubt meanwhile is asked on a new stream.
func TestResyncOwedAnswerHoldsBackForAWhile(t *testing.T) {
	const resyncAfter = 50 * time.Millisecond
	f := &scriptedADS{delta: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)} // never answers
	srv := xdstest.StartUpstream(t, xdstest.WithADS(f))
	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeDelta, ResyncAfter: resyncAfter}, rec, srv.Addr())
	cur, scur := 0, 0
	c.Subscribe(keying.ListenerType, "l6")
	srv.NextDelta(t, &cur, keying.ListenerType)
	rec.nextState(t, &scur, srv.Addr(), true)
	if !c.Resync(keying.ListenerType, "l6") {
		t.Fatal("Resync(l6) = false")
	}
	srv.NextRequest(t, &cur, "the second stream's first request", func(r xdstest.Request) bool {
		return r.StreamID > 1 && r.Delta != nil && r.Delta.GetResponseNonce() == ""
	})
	c.Subscribe(keying.ListenerType, "x")
	srv.NextDelta(t, &cur, keying.ListenerType)
	c.Resync(keying.ListenerType, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Wait(ctx, func(s xdstest.Stats) bool { return s.TotalStreams > 2 }); err != nil {
		t.Fatalf("no new stream asked about x while the server never answered the second stream: %v", err)
	}
}
