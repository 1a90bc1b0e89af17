package relay

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// fleetShape is how a fleet's streams watch names: ids are stream ids in the
// order the streams connected, names[i] the names stream ids[i] watches.
type fleetShape struct {
	ids    []uint64
	names  [][]int
	nNames int
}

// denseFleet is xds-bench's streams run: every stream watches every name;
// churned of them reconnected (left, then came back with new ids).
func denseFleet(streams, names, churned int) fleetShape {
	f := fleetShape{nNames: names}
	all := make([]int, names)
	for i := range all {
		all[i] = i
	}
	r := rand.New(rand.NewPCG(3, 4))
	gone := map[uint64]bool{}
	for _, i := range r.Perm(streams)[:churned] {
		gone[uint64(i+1)] = true
	}
	for id := uint64(1); id <= uint64(streams+churned); id++ {
		if !gone[id] {
			f.ids = append(f.ids, id)
			f.names = append(f.names, all)
		}
	}
	return f
}

// sparseFleet has each stream watch per of names chosen at random: a name has
// few watchers, with ids spread over the fleet.
func sparseFleet(streams, names, per int) fleetShape {
	f := fleetShape{nNames: names}
	r := rand.New(rand.NewPCG(5, 6))
	for id := uint64(1); id <= uint64(streams); id++ {
		f.ids = append(f.ids, id)
		f.names = append(f.names, r.Perm(names)[:per])
	}
	return f
}

func (f fleetShape) build() []*watcherSet {
	sets := make([]*watcherSet, f.nNames)
	for i := range sets {
		sets[i] = &watcherSet{}
	}
	for i, id := range f.ids {
		for _, n := range f.names[i] {
			sets[n].add(id)
		}
	}
	return sets
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkWatcherSetFleet builds the watcher sets of a whole fleet (one op)
// and reports what they keep per stream (live heap after a collection).
func BenchmarkWatcherSetFleet(b *testing.B) {
	for _, c := range []struct {
		name  string
		fleet fleetShape
	}{
		{"dense-10000x100", denseFleet(10000, 100, 0)},
		{"dense-10000x100-churn1000", denseFleet(10000, 100, 1000)},
		{"sparse-10000x5of10000", sparseFleet(10000, 10000, 5)},
	} {
		b.Run(c.name, func(b *testing.B) {
			before := liveHeap()
			sets := c.fleet.build()
			after := liveHeap()
			runtime.KeepAlive(sets)
			for b.Loop() {
				c.fleet.build()
			}
			b.ReportMetric(float64(after-before)/float64(len(c.fleet.ids)), "B/stream")
		})
	}
}

// opsIDs are the ids of the sets the op benchmarks use: dense (a fleet's
// stream ids), spread (the same count over a range a thousand times wider)
// and small (a name with five watchers).
func opsIDs() map[string][]uint64 {
	r := rand.New(rand.NewPCG(7, 8))
	spread := make([]uint64, 0, 10000)
	seen := map[uint64]bool{}
	for len(spread) < 10000 {
		if id := 1 + r.Uint64N(10_000_000); !seen[id] {
			seen[id] = true
			spread = append(spread, id)
		}
	}
	dense := make([]uint64, 10000)
	for i := range dense {
		dense[i] = uint64(i + 1)
	}
	return map[string][]uint64{"dense10000": dense, "spread10000": spread, "small5": {17, 2345, 4711, 8000, 9999}}
}

// BenchmarkWatcherSetOps times each operation over a whole set (one op: every
// id added, looked up, iterated, gathered in a map or removed).
func BenchmarkWatcherSetOps(b *testing.B) {
	for _, name := range []string{"dense10000", "spread10000", "small5"} {
		ids := opsIDs()[name]
		fill := func() *watcherSet {
			s := &watcherSet{}
			for _, id := range ids {
				s.add(id)
			}
			return s
		}
		b.Run(name+"/add", func(b *testing.B) {
			for b.Loop() {
				fill()
			}
		})
		b.Run(name+"/contains", func(b *testing.B) {
			s := fill()
			for b.Loop() {
				for _, id := range ids {
					if !s.contains(id) || s.contains(id+20_000_000) {
						b.Fatal(id)
					}
				}
			}
		})
		b.Run(name+"/all", func(b *testing.B) {
			s := fill()
			var sum uint64
			for b.Loop() {
				for id := range s.all {
					sum += id
				}
			}
			runtime.KeepAlive(sum)
		})
		b.Run(name+"/union", func(b *testing.B) {
			// What a fan-out does with the set (state.watchersOf).
			s := fill()
			for b.Loop() {
				m := make(map[uint64]struct{}, s.len())
				for id := range s.all {
					m[id] = struct{}{}
				}
			}
		})
		b.Run(name+"/remove", func(b *testing.B) {
			sets := make([]*watcherSet, 0, 64)
			for b.Loop() {
				b.StopTimer()
				if len(sets) == 0 {
					for range cap(sets) {
						sets = append(sets, fill())
					}
				}
				s := sets[len(sets)-1]
				sets = sets[:len(sets)-1]
				b.StartTimer()
				for _, id := range ids {
					s.remove(id)
				}
			}
		})
	}
}
