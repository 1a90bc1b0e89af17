package lrs_test

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// Under keying.group_by each node group's load goes on a stream of its own,
// presenting the group's node; clients without a group use the relay's.
func TestNodeGroups(t *testing.T) {
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: u.Addr()}},
		Group: func(n *corev3.Node) (string, *corev3.Node) {
			if n.GetCluster() == "" {
				return "", nil
			}
			return "cluster=" + n.GetCluster(), &corev3.Node{Id: "xds-relay-1/cluster=" + n.GetCluster(), Cluster: n.GetCluster()}
		}})
	want := map[string]sums{}
	for _, c := range []struct{ id, cluster string }{{"a", "blue"}, {"b", "blue"}, {"c", "green"}, {"d", ""}} {
		cl := r.clientNode(t, &corev3.Node{Id: c.id, Cluster: c.cluster})
		s := report("c1", "z1", uint64(len(c.id)+len(c.cluster)), 0, 1, 0)
		cl.send(t, s)
		node := "xds-relay-1"
		if c.cluster != "" {
			node += "/cluster=" + c.cluster
		}
		if want[node] == nil {
			want[node] = sums{}
		}
		want[node].add(s)
	}
	deadline := time.After(10 * time.Second)
	for node, w := range want {
		for {
			got := sums{}
			got.add(u.ReceivedFrom(node)...)
			if cmp.Equal(w, got) {
				break
			}
			select {
			case <-deadline:
				t.Fatalf("node %s: the upstream received %v, want %v", node, got, w)
			case <-u.Got:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}
