package relay

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

func lk(name string) lruKey { return lruKey{Key: keying.Key{TypeURL: keying.ClusterType, Name: name}} }

// golang-lru's Remove runs the eviction callback: forget must not report it.
func TestUnrefLRUForgetIsNotEviction(t *testing.T) {
	u := newUnrefLRU(2)
	u.add(lk("a"))
	u.add(lk("b"))
	u.forget(lk("a"))
	if got := u.take(); len(got) != 0 {
		t.Fatalf("forget reported evictions %v", got)
	}
	u.add(lk("c"))
	u.add(lk("d")) // pushes out b, the oldest
	if got := u.take(); !slices.Equal(got, []lruKey{lk("b")}) {
		t.Fatalf("evicted %v, want [b]", got)
	}
}

// max_unreferenced: 0 keeps nothing that no client watches.
func TestUnrefLRUZeroKeepsNone(t *testing.T) {
	u := newUnrefLRU(0)
	u.add(lk("a"))
	u.forget(lk("a"))
	if got := u.take(); !slices.Equal(got, []lruKey{lk("a")}) {
		t.Fatalf("evicted %v, want [a]", got)
	}
}

// A resource the LRU pushes out while a stream watches it stays, and the
// refusal is counted.
func TestEvictRefusesWatched(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:1"}}
	r, err := New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.lock()
	tc := s.shared.typeCache(keying.ClusterType)
	x := &downstream.Resource{Name: "x", Version: "1", Any: []byte{1}}
	tc.view = &downstream.View{TypeURL: keying.ClusterType, Resources: map[string]*downstream.Resource{"x": x}}
	tc.watchers["x"] = &watcherSet{}
	tc.watchers["x"].add(7)
	s.unref.evicted = append(s.unref.evicted, tc.lruKey("x"))
	s.evict()
	_, kept := tc.view.Resources["x"]
	s.unlock()
	if !kept {
		t.Fatal("a watched resource was evicted")
	}
	if n := testutil.ToFloat64(r.m.EvictionsRefused.WithLabelValues(keying.ClusterType)); n != 1 {
		t.Fatalf("refused evictions counted %v, want 1", n)
	}
}

// Evicting a TP2 key's selection takes nothing from the wildcard set (the
// wildcard covers plain names): the set stays complete. Taken for
// incomplete, a Delta wildcard client that came later waited for good when
// the upstream had nothing new to send (found by the oracle, seed 311154).
func TestEvictTP2KeyKeepsTheWildcardComplete(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:1"}}
	r, err := New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.lock()
	defer s.unlock()
	tc := s.shared.typeCache(keying.ClusterType)
	c := &downstream.Resource{Name: "c", Version: "1", Any: []byte{1}}
	key := keying.SubscriptionKey("c", "env=prod")
	tc.view = &downstream.View{TypeURL: keying.ClusterType, Complete: true,
		Resources: map[string]*downstream.Resource{"c": c, key: c.Selected(key)}}
	tc.wild.add(7) // a wildcard client holds c
	s.unref.evicted = append(s.unref.evicted, tc.lruKey(key))
	s.evict()
	if _, kept := tc.view.Resources[key]; kept {
		t.Fatal("the key's selection was not evicted")
	}
	if !tc.view.Complete {
		t.Fatal("the wildcard set was taken for incomplete")
	}
}
