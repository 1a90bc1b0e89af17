package relay

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/xds-relay/xds-relay/downstream"
)

// checkSet compares s with the model m: contents, length, lookups, and the
// size of its form: a bitmap is never more than twice the hash table the
// same ids would take, a hash table is between an eighth and three quarters
// full.
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
	n := len(m)
	switch {
	case s.bitmap && len(s.slots) > 2*hashSlots(n):
		t.Fatalf("bitmap of %d words for %d ids", len(s.slots)-1, n)
	case !s.bitmap && len(s.slots) > 0 && (n*4 > 3*len(s.slots) || len(s.slots) > minWatcherSlots && n*8 < len(s.slots)):
		t.Fatalf("hash table of %d slots for %d ids", len(s.slots), n)
	}
}

// opID decodes an id: runs of neighbouring ids (a bitmap's) in regions near
// and far from each other, so that sets change form both ways.
func opID(region, low byte) uint64 {
	return []uint64{1, 257, 64 * 40, 1 << 62}[region&3] + uint64(low)
}

// applyOps runs a byte-coded sequence of adds, removes, lookups and
// iterations stopped early on a watcherSet and a map, checking they agree
// after each.
func applyOps(t testing.TB, ops []byte) {
	var s watcherSet
	m := map[uint64]bool{}
	for i := 0; i+1 < len(ops); i += 2 {
		id := opID(ops[i]>>2, ops[i+1])
		switch ops[i] & 3 {
		case 0:
			if s.add(id) == m[id] {
				t.Fatalf("add(%d) new=%v, model has %v", id, !m[id], m[id])
			}
			m[id] = true
		case 1:
			if s.remove(id) != m[id] {
				t.Fatalf("remove(%d) disagrees with the model", id)
			}
			delete(m, id)
		case 2:
			if s.contains(id) != m[id] {
				t.Fatalf("contains(%d) disagrees with the model", id)
			}
		case 3:
			k := int(ops[i+1])
			for x := range s.all {
				if !m[x] {
					t.Fatalf("all yields %d, not in the model", x)
				}
				if k--; k < 0 {
					break
				}
			}
		}
		checkSet(t, &s, m)
	}
}

func TestWatcherSetAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		// Each sequence adds, then removes what it added in another order,
		// both among other operations, drawing ids from one to four regions:
		// sets grow large, change form and empty.
		regions, n := 1+r.UintN(4), r.IntN(400)
		var adds, ops []byte
		op := func(kind byte, id []byte) {
			if r.UintN(4) == 0 {
				ops = append(ops, 2+byte(r.UintN(2))|byte(r.UintN(regions))<<2, byte(r.UintN(256)))
			}
			ops = append(ops, kind|id[0], id[1])
		}
		for range n {
			id := []byte{byte(r.UintN(regions)) << 2, byte(r.UintN(256))}
			adds = append(adds, id...)
			op(0, id)
		}
		for _, i := range r.Perm(n) {
			op(1, adds[2*i:2*i+2])
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

// Ids handed out one after another make a bitmap; one far away makes it a
// hash table again, and its removal a bitmap.
func TestWatcherSetForms(t *testing.T) {
	var s watcherSet
	m := map[uint64]bool{}
	for id := uint64(1); id <= 10000; id++ {
		s.add(id)
		m[id] = true
	}
	checkSet(t, &s, m)
	if !s.bitmap || len(s.slots) != 1+10000/64+1 {
		t.Fatalf("10,000 neighbouring ids: bitmap %v, %d slots", s.bitmap, len(s.slots))
	}
	for _, far := range []uint64{1 << 40, 1<<40 + 1} {
		s.add(far)
		m[far] = true
		checkSet(t, &s, m)
		if s.bitmap {
			t.Fatalf("a bitmap reaching id %d", far)
		}
	}
	for id := uint64(1); id <= 9000; id++ {
		s.remove(id)
		delete(m, id)
	}
	s.remove(1 << 40)
	s.remove(1<<40 + 1)
	delete(m, 1<<40)
	delete(m, 1<<40+1)
	s.add(10001) // (the hash table is rebuilt when it grows or shrinks)
	m[10001] = true
	for id := uint64(9001); id <= 9500; id++ {
		s.remove(id)
		delete(m, id)
	}
	checkSet(t, &s, m)
	if !s.bitmap {
		t.Fatalf("%d neighbouring ids in a hash table of %d slots", s.len(), len(s.slots))
	}
}

// A fleet whose streams come and go (the oldest leave, new ids join) keeps a
// bitmap no larger than its window.
func TestWatcherSetSlidingWindow(t *testing.T) {
	var s watcherSet
	m := map[uint64]bool{}
	for id := uint64(1); id <= 100_000; id++ {
		s.add(id)
		m[id] = true
		if id > 1000 {
			s.remove(id - 1000)
			delete(m, id-1000)
		}
	}
	checkSet(t, &s, m)
	if !s.bitmap || cap(s.slots) > 2*hashSlots(1000) {
		t.Fatalf("1,000 ids: bitmap %v, capacity %d", s.bitmap, cap(s.slots))
	}
}

func FuzzWatcherSet(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 65, 1, 2})
	f.Add([]byte{0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 4, 9, 12, 1, 13, 1, 3, 2, 1, 9})
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
