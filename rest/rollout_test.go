package rest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Guarded rollout over REST: of two nodes holding polls, the canary gets
// the change; the other's poll is held behind the barrier. The canary's
// verdict comes with its next poll: a NACK halts the rollout and the other
// node never sees the change; an ACK releases it to the other's held poll.
func TestPollRollout(t *testing.T) {
	for _, tt := range []struct {
		name string
		nack bool
	}{{"halt", true}, {"release", false}} {
		t.Run(tt.name, func(t *testing.T) {
			before := clusters("c1")
			after := xdstest.Resources{resource.ClusterType: []types.Resource{xdstest.EDSCluster("c1", "eds-moved")}}
			rr := startREST(t, before, 2*time.Second, xdstest.WithConfig(func(c *config.Config) {
				c.Rollout = &config.Rollout{CanaryFraction: 0.5, Hold: 30 * time.Second}
			}))
			v1 := rr.post(t, "clusters", request("node-a", "")).resp.GetVersionInfo()
			wantClusters(t, rr.post(t, "clusters", request("node-b", "")), before)

			polls := map[string]<-chan result{
				"node-a": rr.postAsync(t, "clusters", request("node-a", v1)),
				"node-b": rr.postAsync(t, "clusters", request("node-b", v1)),
			}
			gauge := `xds_relay_downstream_streams{protocol="rest",type_url="` + resource.ClusterType + `"}`
			xdstest.Eventually(t, func() bool { return rr.metric(t, gauge) == 2 }, "both polls held", nil)
			rr.up.SetResources(after)

			// Exactly one node, the canary, is answered with the change.
			var canary, other string
			var r result
			select {
			case r = <-polls["node-a"]:
				canary, other = "node-a", "node-b"
			case r = <-polls["node-b"]:
				canary, other = "node-b", "node-a"
			case <-time.After(xdstest.WaitTimeout):
				t.Fatal("no canary answered")
			}
			wantClusters(t, r, after)
			v2 := r.resp.GetVersionInfo()
			held(t, polls[other])

			verdict := request(canary, v2)
			if tt.nack {
				verdict = request(canary, v1)
				verdict.ErrorDetail = &statuspb.Status{Code: 3, Message: "moved cluster rejected"}
			}
			next := rr.postAsync(t, "clusters", verdict)
			if tt.nack {
				// Halted: the other keeps v1 (its poll ends 304), the canary
				// is not sent what it rejected, the relay serves v1 again.
				if r := wait(t, polls[other]); r.code != http.StatusNotModified {
					t.Fatalf("the other node's poll after the halt: %d %q, want 304", r.code, r.body)
				}
				if r := wait(t, next); r.code != http.StatusNotModified {
					t.Fatalf("the canary's poll after its NACK: %d %q, want 304", r.code, r.body)
				}
				r := rr.post(t, "clusters", request("node-c", ""))
				wantClusters(t, r, before)
				if r.resp.GetVersionInfo() != v1 {
					t.Fatalf("a new node gets version %q, want the accepted %q", r.resp.GetVersionInfo(), v1)
				}
				ros := rr.DebugRollouts()
				if len(ros) != 1 || ros[0].State != "halted" || ros[0].NACKs != 1 || ros[0].Reasons[0] != "moved cluster rejected" {
					t.Fatalf("/debug/rollouts = %+v, want one halted by the NACK", ros)
				}
				return
			}
			r = wait(t, polls[other])
			wantClusters(t, r, after)
			if r.resp.GetVersionInfo() != v2 {
				t.Fatalf("released version %q, want %q", r.resp.GetVersionInfo(), v2)
			}
			if r := wait(t, next); r.code != http.StatusNotModified {
				t.Fatalf("the canary's ACK poll: %d %q, want 304", r.code, r.body)
			}
			if ros := rr.DebugRollouts(); len(ros) != 1 || ros[0].State != "released" || ros[0].ACKs != 1 {
				t.Fatalf("/debug/rollouts = %+v, want one released by the ACK", ros)
			}
		})
	}
}
