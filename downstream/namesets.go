package downstream

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// nameSets interns SotW subscriptions: the streams of a fleet mostly
// subscribe to the same names (every client of a service asks for the same
// clusters' endpoints), and each such set is held once, read-only, however
// many streams subscribe to it. Delta subscriptions change by increments and
// keep their own sets.
type nameSets struct {
	mu   sync.Mutex
	m    map[string]*nameSet // guarded by mu; by setKey
	next uint64              // guarded by mu: the last id given
}

// nameSet is one interned subscription, shared by refs streams. Its map is
// never modified.
type nameSet struct {
	names map[string]struct{}
	key   string
	id    uint64 // unique for the server's life: names its responses in View memos
	refs  int    // guarded by nameSets.mu
}

// intern makes names (a fresh, complete subscription) the stream type's
// set, sharing an equal one if some stream holds it, and releases the set
// held before (*held). It returns the map to use.
func (s *nameSets) intern(held **nameSet, names map[string]struct{}) map[string]struct{} {
	if s == nil {
		return names
	}
	key := setKey(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(*held)
	ns := s.m[key]
	if ns == nil {
		s.next++
		ns = &nameSet{names: names, key: key, id: s.next}
		if s.m == nil {
			s.m = make(map[string]*nameSet)
		}
		s.m[key] = ns
	}
	ns.refs++
	*held = ns
	return ns.names
}

// release drops a stream type's hold on its set.
func (s *nameSets) release(held *nameSet) {
	if s == nil || held == nil {
		return
	}
	s.mu.Lock()
	s.releaseLocked(held)
	s.mu.Unlock()
}

func (s *nameSets) releaseLocked(ns *nameSet) {
	if ns == nil {
		return
	}
	if ns.refs--; ns.refs == 0 {
		delete(s.m, ns.key)
	}
}

// setKey identifies a set of names: the names sorted, each prefixed by its
// length (names are arbitrary bytes, so no separator would do).
func setKey(names map[string]struct{}) string {
	sorted := make([]string, 0, len(names))
	size := 0
	for n := range names {
		sorted = append(sorted, n)
		size += len(n) + 4
	}
	slices.Sort(sorted)
	var b strings.Builder
	b.Grow(size)
	for _, n := range sorted {
		b.WriteString(strconv.Itoa(len(n)))
		b.WriteByte(':')
		b.WriteString(n)
	}
	return b.String()
}
