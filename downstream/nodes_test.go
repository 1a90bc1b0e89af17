package downstream

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Streams presenting equal nodes share one; the entry goes with the last.
func TestNodeTableShares(t *testing.T) {
	var tab nodeTable
	a, ka := tab.intern(&corev3.Node{Id: "a", Cluster: "c"})
	b, kb := tab.intern(&corev3.Node{Id: "a", Cluster: "c"})
	c, kc := tab.intern(&corev3.Node{Id: "a", Cluster: "other"})
	if a != b || ka != kb || ka == 0 {
		t.Fatalf("equal nodes not shared: %p %p keys %d %d", a, b, ka, kb)
	}
	if c == a || kc == ka || c.GetCluster() != "other" {
		t.Fatalf("another node shared: %v", c)
	}
	tab.release(ka)
	if len(tab.m) != 2 {
		t.Fatalf("entry dropped while a stream holds it: %d entries", len(tab.m))
	}
	tab.release(kb)
	tab.release(kc)
	tab.release(0)
	if len(tab.m) != 0 {
		t.Fatalf("%d entries left", len(tab.m))
	}
}
