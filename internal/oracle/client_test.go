package oracle

import (
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// TestFirstRequestsGoOutAtOnce: a client that comes back sends the first
// request of every type at once, as Envoy and gRPC do — the relay gives a
// type its client has not asked for yet a short grace, in which it may
// hold referrers (make before break). The oracle's bookkeeping of a request
// (its watches, the relay's windows) ran between the sends, and for 10,000
// names on a loaded machine took up to 8 s: an Envoy's route request came
// after the grace, and the relay rightly let the clusters its old route
// referred to go (seed 471511).
func TestFirstRequestsGoOutAtOnce(t *testing.T) {
	w := newWorld()
	w.add(&Snapshot{Res: map[string]map[string][]*Res{}})
	r := &Run{world: w, ups: []*Upstream{newUpstream(w, true, false, 1)}, relays: []*relaySlot{{id: "relay-A2"}},
		clients: map[string]*Client{}, log: zap.NewNop()}
	c := newClient(r, ClientSpec{ID: "c5", Shape: Envoy}) // listeners and clusters: the wildcard
	c.types[keying.RouteType].names["r5"] = true
	c.types[keying.EndpointType].names["c9"] = true
	s := &bookedAtSend{c: c}
	c.streams = map[string]*cstream{"": {sotw: s, cancel: func() {}}}
	c.mu.Lock()
	c.requestAllLocked()
	c.mu.Unlock()
	if len(s.booked) != len(worldTypes) {
		t.Fatalf("%d first requests sent, want %d", len(s.booked), len(worldTypes))
	}
	for i, n := range s.booked {
		if n != len(worldTypes) {
			t.Fatalf("first request %d went out when the requests of %d of the %d types were booked (%v): the others waited for the oracle's bookkeeping",
				i+1, n, len(worldTypes), s.booked)
		}
	}
}

// bookedAtSend is a client's SotW stream that records, at each request
// sent, how many of the client's types have their request booked.
type bookedAtSend struct {
	c      *Client
	booked []int
}

func (b *bookedAtSend) Send(*discoverypb.DiscoveryRequest) error {
	n := 0
	for _, ct := range b.c.types {
		if ct.sent {
			n++
		}
	}
	b.booked = append(b.booked, n)
	return nil
}

func (b *bookedAtSend) Recv() (*discoverypb.DiscoveryResponse, error) { select {} }
