package relay

import (
	"math/bits"

	"github.com/xds-relay/xds-relay/downstream"
)

// watcherSet is a set of streams by id (Relay.watcher resolves them). A
// stream is in one set per name it watches — a fleet of 10,000 clients
// watching 100 names each is a million entries — so the set is a compact
// open-addressing hash table of ids: 8 bytes a slot, at least a quarter
// full, where a Go map spends about 30 bytes an entry. Id 0 is never used
// (stream ids start at 1) and marks an empty slot. The zero value and nil
// are empty sets; methods that only read accept nil.
type watcherSet struct {
	slots []uint64 // power-of-two length, linear probing
	n     int
}

const minWatcherSlots = 4

// has reports whether w is in the set.
func (s *watcherSet) has(w downstream.Watcher) bool { return s.contains(w.ID()) }

func (s *watcherSet) len() int {
	if s == nil {
		return 0
	}
	return s.n
}

func (s *watcherSet) contains(id uint64) bool {
	if s == nil || s.n == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	for i := s.home(id); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case id:
			return true
		case 0:
			return false
		}
	}
}

// add puts id in the set and reports whether it was new.
func (s *watcherSet) add(id uint64) bool {
	if (s.n+1)*4 > len(s.slots)*3 {
		s.resize(max(minWatcherSlots, 2*len(s.slots)))
	}
	mask := uint64(len(s.slots) - 1)
	for i := s.home(id); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case id:
			return false
		case 0:
			s.slots[i] = id
			s.n++
			return true
		}
	}
}

// remove takes id out of the set and reports whether it was there. The
// entries after it in its probe run shift back (no tombstones), and the
// table shrinks when it is mostly empty.
func (s *watcherSet) remove(id uint64) bool {
	if s == nil || s.n == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	i := s.home(id)
	for ; s.slots[i] != id; i = (i + 1) & mask {
		if s.slots[i] == 0 {
			return false
		}
	}
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i if i lies between its home
		// slot and j (cyclically).
		if h := s.home(s.slots[j]); (j-h)&mask >= (j-i)&mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
	if len(s.slots) > minWatcherSlots && s.n*8 < len(s.slots) {
		s.resize(len(s.slots) / 2)
	}
	return true
}

// all yields every id (in no particular order). The set must not change
// during the iteration.
func (s *watcherSet) all(yield func(uint64) bool) {
	if s == nil {
		return
	}
	for _, id := range s.slots {
		if id != 0 && !yield(id) {
			return
		}
	}
}

// home is id's first slot: Fibonacci hashing spreads the sequential ids.
func (s *watcherSet) home(id uint64) uint64 {
	return (id * 0x9E3779B97F4A7C15) >> (64 - bits.TrailingZeros(uint(len(s.slots))))
}

func (s *watcherSet) resize(size int) {
	old := s.slots
	s.slots, s.n = make([]uint64, size), 0
	for _, id := range old {
		if id != 0 {
			s.add(id)
		}
	}
}
