package xdstest_test

import (
	"maps"
	"slices"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A Delta response adds or replaces its resources and deletes its removals;
// a name both sent and removed is reported.
func TestDeltaHoldsApply(t *testing.T) {
	h := xdstest.DeltaHolds{"a": "1", "b": "1"}
	bad := h.Apply(&discoverygrpc.DeltaDiscoveryResponse{
		Resources:        []*discoverygrpc.Resource{{Name: "a", Version: "2"}, {Name: "c", Version: "1"}, {Name: "d", Version: "1"}},
		RemovedResources: []string{"b", "d", "never-held"},
	})
	if want := (xdstest.DeltaHolds{"a": "2", "c": "1"}); !maps.Equal(h, want) {
		t.Errorf("holds %v, want %v", h, want)
	}
	if !slices.Equal(bad, []string{"d"}) {
		t.Errorf("sent and removed %q, want [d]", bad)
	}
	if !h.Has("c") || h.Has("b") {
		t.Errorf("Has: c %v, b %v; want true, false", h.Has("c"), h.Has("b"))
	}
}
