package relay_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

const fedX = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x"

// federated configures fedX's authority (on the default servers) and, when
// path is not "", the warm-restart file at path.
func federated(path string) xdstest.RelayOption {
	return xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	})
}

// writeFile runs a relay with opt in front of up until a client that
// subscribes sub holds the clusters set, then closes it, which writes its
// warm-restart file.
func writeFile(t *testing.T, up *xdstest.Upstream, opt xdstest.RelayOption, set, sub []string) {
	t.Helper()
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, sub...)
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp := c.RecvType(resource.ClusterType)
		c.Ack(resp)
		if len(names(t, resp)) == len(set) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never got the set")
		}
	}
	time.Sleep(300 * time.Millisecond) // (were the wildcard's set not complete yet, the tests' clients would be held anyway)
	c.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
}

// An authority's cached, unreferenced CDS resource (its subscription
// lingered and ended) leaves its data unconfirmed when that authority's
// stream goes away, and nothing subscribes the type on that authority again
// to confirm it. A client that comes from another replica with config and
// subscribes default-authority names is answered once the default upstream
// has: another authority's unconfirmed data does not hold it (it was held
// for good; found by a review).
func TestIdleAuthorityHoldsNoOtherClient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		fed   bool
	}{{"named", []string{"c1"}, true}, {"wildcard", nil, true}, {"control named", []string{"c1"}, false}, {"control wildcard", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			up := xdstest.StartUpstream(t)
			up.SetResources(clusters("c1", fedX))
			r := xdstest.StartRelay(t, up.Addr(), federated(""), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.Linger = 0
				c.Upstream.DoesNotExistAfter = 300 * time.Millisecond
			}))
			a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
			if tc.fed {
				a.Subscribe(resource.ClusterType, fedX)
				wantNames(t, a.RecvType(resource.ClusterType), fedX)
			} else {
				a.Subscribe(resource.ClusterType, "c1")
				wantNames(t, a.RecvType(resource.ClusterType), "c1")
			}
			a.Close()
			unsubscribed(t, r) // its subscription ends (linger 0); it stays cached, unreferenced
			up.Restart()       // both authorities' streams go away: their data is unconfirmed

			moved := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "moved"})
			moved.Resume(resource.ClusterType, "v-from-another-replica", tc.names...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := moved.Recv(ctx)
			if err != nil {
				t.Logf("cache: %+v", r.DebugCache(relay.CacheFilter{Type: "Cluster"}))
				t.Fatalf("the client that came from another replica was never answered: %v", err)
			}
			if tc.names == nil {
				wantNames(t, got, "c1", fedX) // the default servers list x too
			} else {
				wantNames(t, got, "c1")
			}
		})
	}
}

// Warm restart: the file holds an authority's CDS resource that nothing
// subscribes after the restart, so its authority's data stays unconfirmed.
// A client that comes from another replica with default-authority CDS
// config is answered once the default upstream has (it was held for good;
// found by a review). The Delta upstream, told the relay holds c1, has
// nothing newer and says nothing: c1 stays unsure until a does-not-exist
// wait of that silence confirms it (no rollback).
func TestWarmRestartIdleAuthorityHoldsNoOtherClient(t *testing.T) {
	t.Run("fed", func(t *testing.T) { warmRestartIdle(t, true) })
	t.Run("control", func(t *testing.T) { warmRestartIdle(t, false) })
}

func warmRestartIdle(t *testing.T, fed bool) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		federated(path)(c)
		c.Upstream.DoesNotExistAfter = time.Second
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", fedX))
	held := []string{"c1"}
	if fed {
		held = append(held, fedX)
	}
	writeFile(t, up, opt, held, held)

	second := xdstest.StartRelay(t, up.Addr(), opt)
	moved := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-from-another-replica", "c1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := moved.Recv(ctx)
	if err != nil {
		t.Fatalf("the client that came from another replica was never answered: %v", err)
	}
	wantNames(t, got, "c1")
}

// unsubscribed waits until no upstream client of r subscribes a cluster.
func unsubscribed(t *testing.T, r *xdstest.Relay) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		subscribed := false
		for _, u := range r.DebugUpstreams() {
			for _, ts := range u.Types {
				subscribed = subscribed || (ts.TypeURL == resource.ClusterType && (ts.Wildcard || len(ts.Names) > 0))
			}
		}
		if !subscribed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("clusters still subscribed upstream: %+v", r.DebugUpstreams())
		}
	}
}

// The warm-restart file's complete wildcard set is the default servers'
// word, even when it holds no resource of the default authority (only
// another authority's names the default servers list, or nothing): with no
// upstream at all, a wildcard client that comes from another replica
// holding c1 is not told it is gone (it was, after f6874cb; and with an
// empty set, before it too; found by a review).
func TestWarmRestartCompleteSetWithoutDefaultResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string // the upstream's clusters when the file is written
		sub  []string // what the first client subscribes
	}{
		{"only-federated-listed", []string{fedX}, []string{"*", fedX}},
		{"empty-set", nil, nil},
		{"control-default-resource", []string{"c0", fedX}, []string{"*", fedX}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := federated(filepath.Join(t.TempDir(), "cache"))
			up := xdstest.StartUpstream(t)
			up.SetResources(clusters(tc.set...))
			writeFile(t, up, opt, tc.set, tc.sub)
			up.Stop() // no upstream answers the second relay: all it has is the file

			second := xdstest.StartRelay(t, up.Addr(), opt)
			moved := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "moved"})
			moved.Resume(resource.ClusterType, "v-from-another-replica") // legacy wildcard, holds c1 from elsewhere
			moved.ExpectNoResponse(1500 * time.Millisecond)
		})
	}
}

// The same on Delta: a wildcard client from another replica with c1 in
// initial_resource_versions is not told c1 is removed.
func TestWarmRestartCompleteSetWithoutDefaultResourcesDelta(t *testing.T) {
	opt := federated(filepath.Join(t.TempDir(), "cache"))
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters(fedX))
	writeFile(t, up, opt, []string{fedX}, []string{"*", fedX})
	up.Stop()

	second := xdstest.StartRelay(t, up.Addr(), opt)
	d := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "moved"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c1": "v1", fedX: "v1"}})
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		resp, ok := d.TryRecv(200 * time.Millisecond)
		if !ok {
			continue
		}
		d.Ack(resp)
		for _, n := range resp.GetRemovedResources() {
			t.Errorf("told %q is removed with no upstream at all (from the warm-restart file)", n)
		}
	}
}
