package downstream

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// A Delta client's change that says a name it subscribes is not found yet
// (View.Unfound: the upstream's silence) waits in the stream's queue behind
// another type's change while the client reads slowly; meanwhile the
// upstream sends the name. When the old change goes out, the relay knows the
// name exists: it must not tell the client it does not — the later change
// sends it. The client was told r5 was removed, then sent r5, while the
// upstream had it all along (the oracle's seed 562747, a phantom loss).
func TestDeltaNotFoundYetQueuedBeforeTheNameCame(t *testing.T) {
	srv := NewServer(&deferredSource{}, Options{Metrics: metrics.New()})
	srv.pool = newPool(0, 0)
	t.Cleanup(srv.Close)
	rec := &recorder[*discoverypb.DeltaDiscoveryResponse]{fresh: func() *discoverypb.DeltaDiscoveryResponse { return &discoverypb.DeltaDiscoveryResponse{} }}
	st := &stream{srv: srv, ss: rec, delta: true, proto: "delta", types: map[string]*typeState{}, done: make(chan struct{}, 1)}
	for _, req := range []*discoverypb.DeltaDiscoveryRequest{
		{TypeUrl: keying.ClusterType, ResourceNamesSubscribe: []string{keying.Wildcard}},
		{TypeUrl: keying.RouteType, ResourceNamesSubscribe: []string{"r5"}},
	} {
		if err := st.handleDelta(req); err != nil {
			t.Fatal(err)
		}
	}
	unknown := &View{TypeURL: keying.RouteType, Seq: 1, Resources: map[string]*Resource{}}
	st.Notify(unknown, []string{"r5"}) // the subscription's answer: nothing known yet
	st.flush()

	unfound := unknown.Next(2, map[string]struct{}{"r5": {}})
	unfound.Unfound = map[string]struct{}{"r5": {}}
	st.Notify(unfound, nil)
	cds := &View{TypeURL: keying.ClusterType, Seq: 3, Complete: true,
		Resources: map[string]*Resource{"c1": resourceOf(t, "c1", &clusterv3.Cluster{Name: "c1"})}}
	st.Notify(cds, []string{keying.Wildcard})
	found := unknown.Next(4, map[string]struct{}{"r5": {}})
	found.Resources = map[string]*Resource{"r5": resourceOf(t, "r5", routeTo("r5", "c1"))}
	st.Notify(found, nil)
	st.flush()

	got := false
	for _, resp := range rec.sent {
		if slices.Contains(resp.GetRemovedResources(), "r5") {
			t.Fatalf("told r5 does not exist after the relay had it: %v", rec.sent)
		}
		for _, r := range resp.GetResources() {
			got = got || r.GetName() == "r5"
		}
	}
	if !got {
		t.Fatalf("r5 was never sent: %v", rec.sent)
	}
}
