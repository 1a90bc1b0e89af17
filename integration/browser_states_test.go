package integration_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// stateTimeout bounds the wait for a relay to reach the state a page is
// rendered in: generous, for a slow machine shared with other work.
const stateTimeout = 30 * time.Second

// The status page in Chromium says, in amber and in words, when the relay is
// ready but not on its control plane: during an outage (the cache served,
// the upstream in backoff), from a warm-restart file with no upstream
// answering since the start, and on a fallback server.
func TestStatusPageStatesInBrowser(t *testing.T) {
	requireChromium(t)

	t.Run("outage", func(t *testing.T) {
		up := xdstest.StartUpstream(t)
		up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
		r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr())
		subscribeCluster(t, r.Addr())
		waitServing(t, r, admin.ServingReady)
		up.Stop()
		waitServing(t, r, admin.ServingCache)

		dom := renderStatus(t, r)
		wantDOM(t, dom, "headline",
			`data-state="cache" id="ready" class="warn">serving the cache; upstream not connected for (default)<`)
		upRow := row(t, dom, "upstream", fmt.Sprintf(`data-server="%s"`, up.Addr()))
		wantDOM(t, upRow, "upstream row", `class="state warn">`, `class="connected muted">no<`)
		wantNoDOM(t, dom, `class="ok">ready<`)
	})

	t.Run("warm-restart file, upstream down", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "warm.pb")
		persist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })
		up := xdstest.StartUpstream(t)
		up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
		first := xdstest.StartRelay(t, up.Addr(), persist)
		subscribeCluster(t, first.Addr())
		xdstest.Eventually(t, func() bool { st, err := os.Stat(path); return err == nil && st.Size() > 0 },
			"the warm-restart file written", nil)
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		up.Stop()

		r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), persist)
		waitServing(t, r, admin.ServingWarmCache)
		dom := renderStatus(t, r)
		wantDOM(t, dom, "headline",
			`data-state="warm_cache" id="ready" class="warn">serving the warm-restart cache; upstream not answered since start<`,
			"serving from the warm-restart file "+path)
		wantNoDOM(t, dom, `class="ok">ready<`)
	})

	t.Run("fallback", func(t *testing.T) {
		primary := xdstest.StartUpstream(t)
		secondary := xdstest.StartUpstream(t)
		secondary.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
		primary.Stop()
		r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), primary.Addr(), xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.XDSServers = append(c.Upstream.XDSServers, config.Server{ServerURI: secondary.Addr()})
		}))
		subscribeCluster(t, r.Addr())
		waitServing(t, r, admin.ServingFallback)

		dom := renderStatus(t, r)
		wantDOM(t, dom, "headline", `data-state="fallback" id="ready" class="warn">serving from a fallback server `+
			`for (default): the first server of the list is unreachable<`)
		secRow := row(t, dom, "upstream", fmt.Sprintf(`data-server="%s"`, secondary.Addr()))
		wantDOM(t, secRow, "fallback row", `class="state warn">connected (fallback: the first server is unreachable)<`,
			"(current)")
		primRow := row(t, dom, "upstream", fmt.Sprintf(`data-server="%s"`, primary.Addr()))
		wantDOM(t, primRow, "primary row", `class="state muted">standby<`)
		wantNoDOM(t, dom, `class="ok">ready<`)
	})
}

// subscribeCluster has a client subscribe to the "svc" cluster and ACK it,
// so that the relay caches it.
func subscribeCluster(t *testing.T, addr string) {
	t.Helper()
	c := xdstest.DialADS(t, addr, &core.Node{Id: "envoy-1"})
	c.Subscribe(resource.ClusterType, xdstest.NamesFor("svc").Cluster)
	c.Ack(c.RecvType(resource.ClusterType))
}

// waitServing waits (stateTimeout) until the relay's headline state is
// state.
func waitServing(t *testing.T, r *xdstest.Relay, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s := admin.OverviewOf(r.Relay).Serving
		if s.State == state {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("relay not %q within %v: %+v", state, stateTimeout, s)
		case <-tick.C:
		}
	}
}

// renderStatus serves r's admin handler and returns the status page's DOM
// as headless Chromium built it.
func renderStatus(t *testing.T, r *xdstest.Relay) string {
	t.Helper()
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	return dumpDOM(t, srv.URL+"/?format=html")
}

// wantDOM fails the test for each string of want that dom lacks.
func wantDOM(t *testing.T, dom, what string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("DOM: %s lacks %q", what, w)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// wantNoDOM fails the test when dom contains s.
func wantNoDOM(t *testing.T, dom, s string) {
	t.Helper()
	if strings.Contains(dom, s) {
		t.Errorf("DOM has %q", s)
	}
}
