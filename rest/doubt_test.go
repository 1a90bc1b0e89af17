package rest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A poll whose version is the relay's own last answer to the node holds the
// relay's copies: nothing in the View can be older than them, so a name of
// an authority that went away (View.Doubtful) does not hold the answer back
// — the other authority's change is answered, the away one's name at the
// copy the poller holds. A gRPC stream that was sent that answer gets the
// change too. A version the relay does not know (another replica's) may
// hold a newer copy of that name: its poll waits for the authority.
func TestPollOwnVersionAnsweredWhileAnAuthorityIsAway(t *testing.T) {
	const a1 = "xdstp://auth/envoy.config.cluster.v3.Cluster/a1"
	auth := xdstest.StartUpstream(t)
	auth.SetResources(clusters(a1))
	rr := startREST(t, clusters("c0"), 2*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr()}}}}
	}))
	var x string
	xdstest.Eventually(t, func() bool {
		r := rr.post(t, "clusters", request("envoy-1", "", "c0", a1))
		x = r.resp.GetVersionInfo()
		return r.resp != nil && len(r.resp.GetResources()) == 2
	}, "both authorities' clusters", nil)

	auth.Stop()
	xdstest.Eventually(t, func() bool {
		return xdstest.Metric(t, rr.Registry(), `xds_relay_upstream_reconnects_total{authority="auth",server="`+auth.Addr()+`"}`) > 0
	}, "the authority's stream gone", nil)
	changed := clusters("c0")
	changed[resource.ClusterType][0] = xdstest.EDSCluster("c0", "eds-c0-moved")
	rr.up.SetResources(changed)

	r := rr.post(t, "clusters", request("envoy-1", x, "c0", a1))
	if r.code != http.StatusOK {
		t.Fatalf("poll with the relay's own version %s while auth is away: %d %q, want 200 with c0's change", x, r.code, r.body)
	}
	wantClusters(t, r, xdstest.Resources{resource.ClusterType: append(changed[resource.ClusterType], xdstest.EDSCluster(a1, "eds-"+a1))})
	if r := rr.post(t, "clusters", request("moved", "v-elsewhere", "c0", a1)); r.code != http.StatusNotModified {
		t.Fatalf("poll with another replica's version while auth is away: %d %q, want 304 (a1 may be a rollback)", r.code, r.body)
	}
}
