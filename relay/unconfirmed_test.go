package relay_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

const fedX = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/x"

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
			r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
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
// found by a review).
func TestWarmRestartIdleAuthorityHoldsNoOtherClient(t *testing.T) {
	t.Run("fed", func(t *testing.T) { warmRestartIdle(t, true) })
	t.Run("control", func(t *testing.T) { warmRestartIdle(t, false) })
}

func warmRestartIdle(t *testing.T, fed bool) {
	path := filepath.Join(t.TempDir(), "cache")
	opt := xdstest.WithConfig(func(c *config.Config) {
		c.Cache.PersistPath = path
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	})
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", fedX))
	first := xdstest.StartRelay(t, up.Addr(), opt)
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	if fed {
		c.Subscribe(resource.ClusterType, "c1", fedX)
		for {
			resp := c.RecvType(resource.ClusterType)
			c.Ack(resp)
			if len(names(t, resp)) == 2 {
				break
			}
		}
	} else {
		c.Subscribe(resource.ClusterType, "c1")
		wantNames(t, c.RecvType(resource.ClusterType), "c1")
	}
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}

	second := xdstest.StartRelay(t, up.Addr(), opt)
	moved := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "moved"})
	moved.Resume(resource.ClusterType, "v-from-another-replica", "c1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
