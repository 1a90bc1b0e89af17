package relay_test

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Canaries are chosen among the watchers that can judge the change: with
// every client but one NACKing the type (among them the one the node-id
// order alone would choose), the one that ACKs is the canary, its ACK judges
// the rollout and releases it to the rest (issue 25, item 11: a canary
// already NACKing gave no verdict and the release went unjudged).
func TestRolloutCanariesCanJudge(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(c1("eds-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Rollout = &config.Rollout{CanaryFraction: 0.2, Hold: 30 * time.Second, MaxNACKRatio: 0}
	}))
	const n = 5
	// The node the old choice (node id order, keyed by the first name) takes
	// first: it NACKs, and so does every node but the last in that order.
	key := func(i int) uint64 {
		h := fnv.New64a()
		h.Write([]byte(fmt.Sprintf("node-%02d", i) + "\x00c1"))
		return h.Sum64()
	}
	judge := 0
	for i := range n {
		if key(i) > key(judge) {
			judge = i
		}
	}
	clients := make([]*xdstest.ADSClient, n)
	for i := range clients {
		clients[i] = xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("node-%02d", i)})
		clients[i].Subscribe(resource.ClusterType, "*")
		resp := clients[i].RecvType(resource.ClusterType)
		if i == judge {
			clients[i].Ack(resp)
		} else {
			clients[i].Nack(resp, "rejects everything")
		}
	}
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_nacks_total", nil) == n-1
	}, "the relay has the NACKs", nil)
	up.SetResources(c1("eds-2"))
	got, rest := canaries(t, clients)
	if len(got) != 1 || got[judge] == nil {
		t.Fatalf("canaries %v, want only client %d (the one that ACKs)", got, judge)
	}
	clients[judge].Ack(got[judge])
	for _, i := range rest {
		if g := edsOf(t, clients[i].RecvType(resource.ClusterType)); g != "eds-2" {
			t.Fatalf("client %d got %q after the release", i, g)
		}
	}
	if info := r.DebugRollouts(); len(info) != 1 || info[0].State != "released" || !info[0].Judged || info[0].ACKs != 1 {
		t.Fatalf("/debug/rollouts = %+v, want released and judged by the canary's ACK", info)
	}
}
