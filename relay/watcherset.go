package relay

import (
	"math/bits"
	"slices"

	"github.com/xds-relay/xds-relay/downstream"
)

// watcherSet is a set of streams by id (Relay.watcher resolves them). A
// stream is in one set per name it watches — a fleet of 10,000 clients
// watching 100 names each is a million entries — so the set is compact, in
// one of two forms, whichever is smaller when it is rebuilt:
//   - a hash table: an open-addressing table of ids, 8 bytes a slot, at least
//     a quarter full, where a Go map spends about 30 bytes an entry; id 0 is
//     never used (stream ids start at 1) and marks an empty slot;
//   - a bitmap of the ids between its first and last word, 1 bit an id in
//     that range: the form of a name a fleet watches, whose ids are the
//     stream ids handed out one after another (slots[0] is the number of the
//     first word, id/64; the words follow).
//
// The zero value and nil are empty sets; methods that only read accept nil.
type watcherSet struct {
	slots  []uint64
	n      int32
	bitmap bool
}

const (
	minWatcherSlots = 4
	// minBitmapSlots keeps small sets hash tables: a bitmap saves nothing
	// there worth a change of form.
	minBitmapSlots = 16
)

// has reports whether w is in the set.
func (s *watcherSet) has(w downstream.Watcher) bool { return s.contains(w.ID()) }

func (s *watcherSet) len() int {
	if s == nil {
		return 0
	}
	return int(s.n)
}

func (s *watcherSet) contains(id uint64) bool {
	if s == nil || s.n == 0 {
		return false
	}
	if s.bitmap {
		return s.hasBit(id)
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

// hasBit is contains for a bitmap.
func (s *watcherSet) hasBit(id uint64) bool {
	i, ok := s.word(id)
	return ok && s.slots[i]&(1<<(id&63)) != 0
}

// add puts id in the set and reports whether it was new.
func (s *watcherSet) add(id uint64) bool {
	if s.bitmap {
		return s.addBit(id)
	}
	if (int(s.n)+1)*4 > len(s.slots)*3 {
		if s.rebuild(id); s.bitmap {
			return s.addBit(id)
		}
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

// addBit is add for a bitmap. An id beyond its ends widens it while it stays
// within twice the hash table's size; beyond that the set is rebuilt.
func (s *watcherSet) addBit(id uint64) bool {
	i, ok := s.word(id)
	if !ok {
		first, last := s.slots[0], s.slots[0]+uint64(len(s.slots))-2
		lo, hi := min(first, id>>6), max(last, id>>6)
		if hi-lo+2 > 2*uint64(hashSlots(int(s.n)+1)) {
			if s.rebuild(id); !s.bitmap {
				return s.add(id)
			}
		} else if lo < first {
			slots := make([]uint64, hi-lo+2)
			slots[0] = lo
			copy(slots[1+first-lo:], s.slots[1:])
			s.slots = slots
		} else {
			s.slots = append(s.slots, make([]uint64, hi-last)...)
		}
		i, _ = s.word(id)
	}
	bit := uint64(1) << (id & 63)
	if s.slots[i]&bit != 0 {
		return false
	}
	s.slots[i] |= bit
	s.n++
	return true
}

// word returns the index in slots of id's word in a bitmap, and whether the
// bitmap reaches it.
func (s *watcherSet) word(id uint64) (int, bool) {
	i := id>>6 - s.slots[0] // (wraps below the first word)
	return int(i + 1), i < uint64(len(s.slots)-1)
}

// remove takes id out of the set and reports whether it was there. In a
// hash table the entries after it in its probe run shift back (no
// tombstones); a set that became much larger than it needs is rebuilt.
func (s *watcherSet) remove(id uint64) bool {
	if s == nil || s.n == 0 {
		return false
	}
	if s.bitmap {
		i, ok := s.word(id)
		bit := uint64(1) << (id & 63)
		if !ok || s.slots[i]&bit == 0 {
			return false
		}
		s.slots[i] &^= bit
		if s.n--; s.n == 0 {
			*s = watcherSet{}
		} else if len(s.slots) > 2*hashSlots(int(s.n)) {
			s.rebuild(0)
		}
		return true
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
	if len(s.slots) > minWatcherSlots && int(s.n)*8 < len(s.slots) {
		s.rebuild(0)
	}
	return true
}

// all yields every id (in no particular order). The set must not change
// during the iteration.
func (s *watcherSet) all(yield func(uint64) bool) {
	if s == nil {
		return
	}
	if s.bitmap {
		s.allBits(yield)
		return
	}
	for _, id := range s.slots {
		if id != 0 && !yield(id) {
			return
		}
	}
}

// allBits is all for a bitmap: the ids in increasing order.
func (s *watcherSet) allBits(yield func(uint64) bool) {
	first := s.slots[0]
	for i, w := range s.slots[1:] {
		for ; w != 0; w &= w - 1 {
			if !yield((first+uint64(i))<<6 | uint64(bits.TrailingZeros64(w))) {
				return
			}
		}
	}
}

// home is id's first slot in a hash table: Fibonacci hashing spreads the
// sequential ids.
func (s *watcherSet) home(id uint64) uint64 {
	return (id * 0x9E3779B97F4A7C15) >> (64 - bits.TrailingZeros(uint(len(s.slots))))
}

// hashSlots is the size of a hash table for n ids: at most three quarters
// full.
func hashSlots(n int) int {
	size := minWatcherSlots
	for n*4 > size*3 {
		size *= 2
	}
	return size
}

// rebuild puts the set's ids in the smaller of the two forms, sized for them
// and for id when it is not 0 (about to be added).
func (s *watcherSet) rebuild(id uint64) {
	old, n := *s, int(s.n)
	if id != 0 {
		n++
	}
	*s = watcherSet{}
	if size := hashSlots(n); size < minBitmapSlots {
		s.slots = make([]uint64, size)
	} else if lo, hi := old.span(id); hi>>6-lo>>6+2 > uint64(size) {
		s.slots = make([]uint64, size)
	} else {
		s.slots, s.bitmap = make([]uint64, hi>>6-lo>>6+2), true
		s.slots[0] = lo >> 6
	}
	if old.bitmap {
		for x := range old.allBits {
			s.add(x)
		}
		return
	}
	for _, x := range old.slots {
		if x != 0 {
			s.add(x)
		}
	}
}

// span returns the least and the greatest of the set's ids and id (when it
// is not 0).
func (s *watcherSet) span(id uint64) (lo, hi uint64) {
	lo, hi = id, id
	if s.bitmap {
		words := s.slots[1:]
		i := slices.IndexFunc(words, func(w uint64) bool { return w != 0 })
		j := len(words) - 1
		for words[j] == 0 {
			j--
		}
		first := (s.slots[0]+uint64(i))<<6 | uint64(bits.TrailingZeros64(words[i]))
		last := (s.slots[0]+uint64(j))<<6 | uint64(63-bits.LeadingZeros64(words[j]))
		if id == 0 {
			return first, last
		}
		return min(id, first), max(id, last)
	}
	for _, x := range s.slots {
		if x != 0 && (lo == 0 || x < lo) {
			lo = x
		}
		hi = max(hi, x)
	}
	return lo, hi
}
