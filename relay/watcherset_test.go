package relay

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/xds-relay/xds-relay/downstream"
)

// checkSet compares s with the model m: contents, length, and that every id
// is reachable from its home slot.
func checkSet(t testing.TB, s *watcherSet, m map[uint64]bool) {
	t.Helper()
	if s.len() != len(m) {
		t.Fatalf("len %d, want %d", s.len(), len(m))
	}
	got := map[uint64]bool{}
	for id := range s.all {
		if got[id] {
			t.Fatalf("id %d twice", id)
		}
		got[id] = true
		if !s.contains(id) {
			t.Fatalf("id %d stored but not found", id)
		}
	}
	if !maps.Equal(got, m) {
		t.Fatalf("set %v, want %v", got, m)
	}
}

// applyOps runs a byte-coded sequence of adds and removes on a watcherSet and
// a map, checking they agree after each.
func applyOps(t testing.TB, ops []byte) {
	var s watcherSet
	m := map[uint64]bool{}
	for i := 0; i+1 < len(ops); i += 2 {
		id := uint64(ops[i+1]&0x3f) + 1 // a small id space: collisions and reuse
		if ops[i]&1 == 0 {
			if s.add(id) == m[id] {
				t.Fatalf("add(%d) new=%v, model has %v", id, !m[id], m[id])
			}
			m[id] = true
		} else {
			if s.remove(id) != m[id] {
				t.Fatalf("remove(%d) disagrees with the model", id)
			}
			delete(m, id)
		}
		checkSet(t, &s, m)
	}
}

func TestWatcherSetAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ops := make([]byte, 2*r.IntN(300))
		for i := range ops {
			ops[i] = byte(r.UintN(256))
		}
		applyOps(t, ops)
	}
	var nilSet *watcherSet
	if nilSet.len() != 0 || nilSet.contains(1) || nilSet.remove(1) {
		t.Fatal("nil set not empty")
	}
}

// A large set grows and shrinks back when emptied.
func TestWatcherSetShrinks(t *testing.T) {
	var s watcherSet
	for id := uint64(1); id <= 10000; id++ {
		s.add(id)
	}
	if len(s.slots) > 4*10000/3*2 {
		t.Fatalf("%d slots for 10000 ids", len(s.slots))
	}
	for id := uint64(1); id <= 10000; id++ {
		if !s.remove(id) {
			t.Fatalf("remove(%d)", id)
		}
	}
	if s.len() != 0 || len(s.slots) > minWatcherSlots {
		t.Fatalf("after emptying: %d ids, %d slots", s.len(), len(s.slots))
	}
}

func FuzzWatcherSet(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 65, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) { applyOps(t, ops) })
}

// BenchmarkWatcherSet fills a set with 10,000 stream ids, as one name watched
// by a fleet, beside the Go map it replaced: B/op is the memory per set.
func BenchmarkWatcherSet(b *testing.B) {
	b.Run("watcherSet", func(b *testing.B) {
		for b.Loop() {
			var s watcherSet
			for id := uint64(1); id <= 10000; id++ {
				s.add(id)
			}
		}
	})
	b.Run("map-baseline", func(b *testing.B) {
		for b.Loop() {
			s := map[uint64]downstream.Watcher{}
			for id := uint64(1); id <= 10000; id++ {
				s[id] = nil
			}
		}
	})
}
