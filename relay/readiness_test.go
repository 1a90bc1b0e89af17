package relay_test

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// Contract (/readyz): a relay that has not reached an upstream yet is not
// ready, and says so; it becomes ready once it syncs, before any client
// came (it dials its default servers at once).
func TestReadyOnlyOnceSynced(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	up.Stop()
	r := xdstest.StartRelay(t, up.Addr())
	xdstest.Eventually(t, func() bool {
		code, body := readyz(r.Relay)
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "not synced: no upstream server reached yet")
	}, "503 not synced while the upstream is down", func() any { _, body := readyz(r.Relay); return body })
	if got := metricValue(t, r.Relay, "xds_relay_upstream_connected", map[string]string{"scope": "shared", "server": up.Addr()}); got != 0 {
		t.Errorf("xds_relay_upstream_connected before any connection = %v, want 0 (present from the start)", got)
	}
	if got := metricValue(t, r.Relay, "xds_relay_upstream_synced", nil); got != 0 {
		t.Errorf("xds_relay_upstream_synced = %v, want 0", got)
	}

	up.Restart()
	xdstest.Eventually(t, r.Ready, "ready once the upstream is reachable", func() any { _, body := readyz(r.Relay); return body })
	if code, body := readyz(r.Relay); code != http.StatusOK || body != "ready: serving, synced with an upstream\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	for name, labels := range map[string]map[string]string{
		"xds_relay_upstream_connected": {"scope": "shared", "server": up.Addr(), "authority": ""},
		"xds_relay_upstream_synced":    nil,
		"xds_relay_ready":              nil,
	} {
		if got := metricValue(t, r.Relay, name, labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", name, labels, got)
		}
	}

	// Synced once is enough: fail static while the upstream is down again.
	up.Stop()
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_connected", map[string]string{"scope": "shared", "server": up.Addr()}) == 0
	}, "disconnected", nil)
	if !r.Ready() {
		t.Error("not ready after losing the upstream; want fail static")
	}
}

// A relay that loaded its warm-restart file is ready with no upstream
// reachable (its cache can serve), unless readiness.require_sync.
func TestReadyFromWarmFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.bin")
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	first := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path }))
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "c1")
	c.Ack(c.RecvType(resource.ClusterType))
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	up.Stop()

	warm := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path }))
	xdstest.Eventually(t, warm.Ready, "ready from the warm file", nil)
	if code, body := readyz(warm.Relay); code != http.StatusOK || !strings.Contains(body, "warm-restart file") {
		t.Errorf("/readyz = %d %q, want 200 from the warm-restart file", code, body)
	}
	client := xdstest.DialADS(t, warm.Addr(), &core.Node{Id: "n2"})
	client.Subscribe(resource.ClusterType, "c1")
	wantNames(t, client.RecvType(resource.ClusterType), "c1")

	strict := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Readiness.RequireSync = true
	}))
	xdstest.Eventually(t, func() bool {
		code, body := readyz(strict.Relay)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "readiness.require_sync")
	}, "not ready with require_sync", func() any { _, body := readyz(strict.Relay); return body })
}

// metricValue is the value of the sample of family whose labels include
// labels (the first one found), or -1 when there is none.
func metricValue(t *testing.T, r *relay.Relay, family string, labels map[string]string) float64 {
	t.Helper()
	fams, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// OPERATIONS.md "Warming a new replica": a new replica whose xds_servers list
// a sibling relay after the control plane warms from the sibling while the
// control plane is down: it becomes ready (synced with the sibling) and
// serves what the sibling has cached. A cold replica without the fallback
// stays unready (TestReadyOnlyOnceSynced).
func TestWarmFromSibling(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	sibling := xdstest.StartRelay(t, up.Addr())
	c := xdstest.DialADS(t, sibling.Addr(), &core.Node{Id: "envoy-1"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1", "c2")
	up.Stop() // control plane outage; the sibling serves from its cache

	fresh := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(cfg *config.Config) {
		cfg.Upstream.XDSServers = []config.Server{{ServerURI: up.Addr()}, {ServerURI: sibling.Addr()}}
	}))
	xdstest.Eventually(t, fresh.Ready, "the new replica ready through its sibling",
		func() any { _, body := readyz(fresh.Relay); return body })
	moved := xdstest.DialADS(t, fresh.Addr(), &core.Node{Id: "envoy-2"})
	moved.Subscribe(resource.ClusterType, "*")
	wantNames(t, moved.RecvType(resource.ClusterType), "c1", "c2")
	if got := metricValue(t, fresh.Relay, "xds_relay_upstream_connected",
		map[string]string{"scope": "shared", "server": sibling.Addr()}); got != 1 {
		t.Errorf("xds_relay_upstream_connected{server=sibling} = %v, want 1", got)
	}
}

// An upstream that serves no xDS (every stream ends Unimplemented) never
// makes the relay ready, also with readiness.require_sync: it said "synced
// with an upstream" as soon as a stream opened, before any answer.
func TestNotSyncedWithoutXDS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer() // no xDS service
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	r := xdstest.StartRelay(t, lis.Addr().String(), xdstest.WithConfig(func(c *config.Config) { c.Readiness.RequireSync = true }))
	deadline := time.Now().Add(3 * time.Second) // three times what proves an xDS server by its silence
	for time.Now().Before(deadline) {
		if code, body := readyz(r.Relay); code == http.StatusOK {
			t.Fatalf("ready with an upstream that serves no xDS: %q", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := metricValue(t, r.Relay, "xds_relay_upstream_synced", nil); got != 0 {
		t.Errorf("xds_relay_upstream_synced = %v, want 0", got)
	}
}
