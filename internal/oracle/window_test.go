package oracle

import (
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
)

// TestToldAtCountsWhatTheRelayAcknowledged: a response the Upstream queued
// but the relay never acknowledged (the stream broke first, or it still sits
// behind a 10,000-cluster CDS response) has not told the relay of its names,
// so notFoundYet must still allow the relay's "does not exist" for them; nor
// has one it NACKed
// (seed 340087 of the final soak: relay-B1's RDS answer carrying r7 was
// lost in an upstream-down; after the reconnect the answer came 1.4 s late
// behind the large CDS, the relay's SotW RDS wait of 600 ms ended first, and
// the run failed with a phantom loss of a route the client never held).
func TestToldAtCountsWhatTheRelayAcknowledged(t *testing.T) {
	w := newWorld()
	s := &Snapshot{Res: map[string]map[string][]*Res{}}
	s.put(newRes(keying.RouteType, "r7", "", &route.RouteConfiguration{Name: "r7"}, nil))
	w.add(s)
	u := newUpstream(w, true, false, 1)
	var sent []*discoverypb.DiscoveryResponse
	st := u.open(false, func(m proto.Message) error {
		sent = append(sent, m.(*discoverypb.DiscoveryResponse))
		return nil
	})
	node := &corepb.Node{Id: "relay-B1"}
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B1 as soon as the Upstream queued it; the relay has not acknowledged it")
	}
	st.onSotW(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		VersionInfo: version(s), ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B1", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B1 acknowledged the response that carried it")
	}
	// A NACKed response is no answer: the relay holds none of it.
	other := u.open(false, func(proto.Message) error { return nil })
	node2 := &corepb.Node{Id: "relay-B2"}
	other.onSotW(&discoverypb.DiscoveryRequest{Node: node2, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"}})
	other.onSotW(&discoverypb.DiscoveryRequest{Node: node2, TypeUrl: keying.RouteType, ResourceNames: []string{"r7"},
		ResponseNonce: "1", ErrorDetail: &statuspb.Status{Message: "rejected"}})
	if _, told := u.ToldAt("relay-B2", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B2 by a response the relay NACKed")
	}
	// Delta: the same, each response acknowledged by its own nonce.
	d := u.open(true, func(proto.Message) error { return nil })
	node3 := &corepb.Node{Id: "relay-B3"}
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{Node: node3, TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r7"}})
	if _, told := u.ToldAt("relay-B3", keying.RouteType, "r7"); told {
		t.Fatal("r7 counts as told to relay-B3 as soon as the Upstream queued its Delta response")
	}
	d.onDelta(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: "1"})
	if _, told := u.ToldAt("relay-B3", keying.RouteType, "r7"); !told {
		t.Fatal("r7 does not count as told once relay-B3 acknowledged the Delta response that carried it")
	}
}
