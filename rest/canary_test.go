package rest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A canary that ACKed a pending rollout keeps what it accepted: its next
// poll, while the other canary has not answered yet, is held, never answered
// with the version before the change (a rollback).
func TestPollCanaryAckKeepsTheChange(t *testing.T) {
	before := clusters("c1")
	after := xdstest.Resources{resource.ClusterType: []types.Resource{xdstest.EDSCluster("c1", "eds-moved")}}
	rr := startREST(t, before, quiet, xdstest.WithConfig(func(c *config.Config) {
		c.Rollout = &config.Rollout{CanaryFraction: 0.7, Hold: 30 * time.Second} // two canaries of three
	}))
	nodes := []string{"node-a", "node-b", "node-c"}
	v1 := ""
	for _, n := range nodes {
		r := rr.post(t, "clusters", request(n, ""))
		wantClusters(t, r, before)
		v1 = r.resp.GetVersionInfo()
	}
	polls := map[string]<-chan result{}
	for _, n := range nodes {
		polls[n] = rr.postAsync(t, "clusters", request(n, v1))
	}
	gauge := `xds_relay_downstream_streams{protocol="rest",type_url="` + resource.ClusterType + `"}`
	xdstest.Eventually(t, func() bool { return rr.metric(t, gauge) == 3 }, "three polls held", nil)
	rr.up.SetResources(after)

	// The first canary answered with the change ACKs it.
	var canary string
	var r result
	select {
	case r = <-polls["node-a"]:
		canary = "node-a"
	case r = <-polls["node-b"]:
		canary = "node-b"
	case r = <-polls["node-c"]:
		canary = "node-c"
	case <-time.After(xdstest.WaitTimeout):
		t.Fatal("no canary answered")
	}
	wantClusters(t, r, after)
	v2 := r.resp.GetVersionInfo()
	if r := rr.post(t, "clusters", request(canary, v2)); r.code != http.StatusNotModified {
		t.Fatalf("the canary's poll after its ACK, the rollout pending: %d %q, want 304 (it holds %s)", r.code, r.body, v2)
	}
	if ros := rr.DebugRollouts(); len(ros) != 1 || ros[0].State != "pending" || ros[0].ACKs != 1 {
		t.Fatalf("/debug/rollouts = %+v, want one pending with one ACK", ros)
	}
}
