package gateway_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Warm restart: a relay restarted while the control plane is away serves
// the snapshots and resources it had, tells the upstream what it holds when
// it is back, and never reports a resource removed before the upstream said
// so. Private keys are not written to disk.
func TestWarmRestart(t *testing.T) {
	dir := t.TempDir()
	persist := func(c *config.Config) { c.Cache.PersistPath = filepath.Join(dir, "cache") }
	e := start(t, xdstest.WithConfig(persist))
	noSecrets := []string{controlv1.ListenerType, controlv1.HttpRouteType, controlv1.BackendClusterType}
	e.publish("blue", 0)
	sotw := xdstest.DialGatewaySotW(t, e.relay.Addr())
	sotw.Send(subscribe("s-1", "blue", "", noSecrets...))
	r1 := sotw.MustRecv()
	sotw.Send(ack(r1))
	secret := xdstest.DialGatewaySotW(t, e.relay.Addr()) // a snapshot with the secrets
	secret.Send(subscribe("s-2", "blue", ""))
	secret.MustRecv()
	delta := dialDelta(t, e, "d-1", "blue", []string{controlv1.HttpRouteType}, nil)
	delta.recv("")
	sotw.Close()
	secret.Close()
	delta.Close()
	if err := e.relay.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	e.cp.Stop()
	file, err := os.ReadFile(filepath.Join(dir, "cache.gateway"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(file, []byte("PRIVATE KEY")) {
		t.Fatal("the warm-restart file holds a private key")
	}

	// Restarted, the control plane away.
	r2 := xdstest.StartRelay(t, e.cp.Addr(), xdstest.WithConfig(persist), xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: true}
	}))
	s2 := xdstest.DialGatewaySotW(t, r2.Addr())
	s2.Send(subscribe("s-1", "blue", "", noSecrets...))
	if got := s2.MustRecv(); got.GetVersion() != r1.GetVersion() || !proto.Equal(got.GetSnapshot(), r1.GetSnapshot()) {
		t.Fatalf("after the restart: version %q, want the cached %q", got.GetVersion(), r1.GetVersion())
	}
	held := map[string]map[string]string{controlv1.HttpRouteType: delta.held[controlv1.HttpRouteType]}
	held[controlv1.HttpRouteType]["default/only-the-dp-has-it"] = "v0"
	e2 := &env{cp: e.cp, fleet: e.fleet, relay: r2}
	d2 := dialDelta(t, e2, "d-1", "blue", []string{controlv1.HttpRouteType}, held)
	d2.ExpectNone(quiet) // nothing new, and nothing removed while the cache does not know
	fresh := dialDelta(t, e2, "d-2", "blue", []string{controlv1.HttpRouteType}, nil)
	if r := fresh.recv(""); len(r.GetResources()) != spec.Routes || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("a new data plane after the restart: %v", r)
	}

	// The control plane comes back without one route.
	snap, _ := e.cp.Snapshot("blue")
	smaller := proto.Clone(snap).(*controlv1.ConfigSnapshot)
	smaller.HttpRoutes = smaller.HttpRoutes[:len(smaller.HttpRoutes)-1]
	v2 := e.cp.Set("blue", smaller)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := e.cp.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s2.MustRecv(); got.GetVersion() != v2 {
		t.Fatalf("SotW after the upstream came back: %q, want %q", got.GetVersion(), v2)
	}
	r := d2.recv("")
	if got := strings.Join(r.GetRemovedResources(), ","); got != "default/only-the-dp-has-it,default/route-3" || len(r.GetResources()) != 0 {
		t.Fatalf("Delta after the upstream came back: %v, want the two removals", r)
	}
	d2.wantHeld(e.cp, "blue", controlv1.HttpRouteType)
	// The Delta upstream was told what the relay held; the SotW upstream
	// was asked afresh (its answer is what confirms the cached snapshot).
	var sawSotW, sawInitial bool
	for _, q := range e.cp.Requests() {
		sawSotW = sawSotW || (q.Sotw != nil && q.Sotw.GetNonce() == "" && q.Sotw.GetVersion() == "")
		sawInitial = sawInitial || (q.Delta != nil && q.Delta.GetInitialResourceVersions()[controlv1.HttpRouteType] != "")
	}
	if !sawSotW || !sawInitial {
		t.Errorf("upstream requests after the restart: SotW without a version %v, Delta initial versions %v", sawSotW, sawInitial)
	}
}

// A relay restarted from its warm-restart file while the control plane is
// still at the cached version: a data plane that comes from a replica behind
// (running an older version) is sent the upstream's current snapshot — the
// relay does not wait for a change the control plane may never make.
func TestWarmRestartServesDataPlanesBehind(t *testing.T) {
	dir := t.TempDir()
	persist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = filepath.Join(dir, "cache") })
	e := start(t, persist)
	_, v1 := e.publish("blue", 0)
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	noSecrets := []string{controlv1.ListenerType, controlv1.HttpRouteType, controlv1.BackendClusterType}
	dp.Send(subscribe("s-1", "blue", "", noSecrets...))
	r1 := dp.MustRecv()
	dp.Send(ack(r1))
	dp.Close()
	if err := e.relay.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	r2 := xdstest.StartRelay(t, e.cp.Addr(), persist, xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: true}
	}))
	behind := xdstest.DialGatewaySotW(t, r2.Addr())
	behind.Send(subscribe("s-2", "blue", "v0-of-a-replica-behind", noSecrets...))
	if got := behind.MustRecv(); got.GetVersion() != v1 {
		t.Fatalf("the data plane from a replica behind got %q, want the upstream's %q", got.GetVersion(), v1)
	}
}
