package downstream_test

import (
	"slices"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// A Delta ADS client comes back (initial_resource_versions) holding l4 → r5
// → c1, which the upstream deleted. It sends its first request of every type
// before it reads a response, but the relay has its CDS request long before
// the rest: the EDS request behind it names ten thousand clusters and takes
// longer than the reconnect's grace to arrive on a loaded machine. The relay
// waits for the client all that time, yet cannot tell that its LDS and RDS
// requests are on their way; the client's answer to a response comes after
// them. c1's removal waits until the client drops r5, as l4's removal tells
// it to, within Options.MoveWait (operators of such worlds set seconds).
func TestDeltaComebackWaitsForTheClientsAnswer(t *testing.T) {
	src := newFakeSource()
	src.publish(keying.ClusterType, map[string]string{"c2": "c2"})
	src.publish(keying.ListenerType, map[string]string{"l6": "l6"})
	c := xdstest.DialDelta(t, startWith(t, src, downstream.Options{MoveWait: time.Minute}), testNode)
	c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c1": "elsewhere"}})
	holdsR5 := true
	check := func(r *discoverypb.DeltaDiscoveryResponse) (done bool) {
		t.Helper()
		removed := r.GetRemovedResources()
		switch {
		case r.GetTypeUrl() == keying.ListenerType && slices.Contains(removed, "l4"):
			c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResourceNamesUnsubscribe: []string{"r5"}})
			holdsR5 = false
		case r.GetTypeUrl() == keying.ClusterType && slices.Contains(removed, "c1"):
			if holdsR5 {
				t.Fatal("c1 removed while the client still holds r5, which may refer to it (its RDS request was on its way)")
			}
			return true
		}
		return false
	}
	// Twice the grace before the rest of the client's first requests arrive;
	// what it receives meanwhile it answers after them.
	var early []*discoverypb.DeltaDiscoveryResponse
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if r, ok := c.TryRecv(time.Until(deadline)); ok {
			check(r)
			early = append(early, r)
		}
	}
	for _, req := range []*discoverypb.DeltaDiscoveryRequest{
		{TypeUrl: keying.EndpointType, ResourceNamesSubscribe: []string{"c1"}},
		{TypeUrl: keying.ListenerType, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: map[string]string{"l4": "elsewhere"}},
		{TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r5"}, InitialResourceVersions: map[string]string{"r5": "elsewhere"}},
	} {
		c.Send(req)
	}
	for _, r := range early {
		c.Ack(r)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		r, ok := c.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		c.Ack(r)
		if check(r) {
			return
		}
	}
	t.Fatal("c1 was never removed")
}

// A client that came back holding c1, which the upstream deleted, and that
// asks for no type that may refer to it is told c1 is gone once it answered
// a response — its first requests are all in then — without waiting
// Options.MoveWait; one that never answers, once MoveWait is over.
func TestDeltaComebackWithoutReferrersGetsTheRemoval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		moveWait time.Duration
		answers  bool
	}{
		{"answers", time.Minute, true},
		{"never answers", 1500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			src.publish(keying.ClusterType, map[string]string{"c2": "c2"})
			c := xdstest.DialDelta(t, startWith(t, src, downstream.Options{MoveWait: tc.moveWait}), testNode)
			c.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{"*"},
				InitialResourceVersions: map[string]string{"c1": "elsewhere"}})
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				r, ok := c.TryRecv(time.Until(deadline))
				if !ok {
					break
				}
				if slices.Contains(r.GetRemovedResources(), "c1") {
					return
				}
				if tc.answers {
					c.Ack(r)
				}
			}
			t.Fatal("c1 was never removed")
		})
	}
}
