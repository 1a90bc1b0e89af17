package relay

import (
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/xds-relay/xds-relay/keying"
)

// unrefLRU orders the cached resources that nothing pins — no stream
// watches them and no upstream subscription covers them — so that the
// oldest are dropped past cache.max_unreferenced. Guarded by Relay.mu.
//
// golang-lru's Remove runs the eviction callback like a capacity eviction
// does, so a resource taken out of the LRU because a client watches it again
// must not be reported as evicted: forget does that.
type unrefLRU struct {
	lru *simplelru.LRU[lruKey, struct{}] // nil: max_unreferenced 0, keep none
	// evicted collects what capacity pushed out, for Relay.evict.
	evicted    []lruKey
	forgetting bool
}

// lruKey names an unreferenced resource of a scope.
type lruKey struct {
	scope string
	keying.Key
}

func newUnrefLRU(size int) *unrefLRU {
	u := &unrefLRU{}
	if size > 0 {
		u.lru, _ = simplelru.NewLRU[lruKey, struct{}](size, func(k lruKey, _ struct{}) {
			if !u.forgetting {
				u.evicted = append(u.evicted, k)
			}
		})
	}
	return u
}

// add makes k the most recently unreferenced resource; what the bound
// pushes out is collected for take.
func (u *unrefLRU) add(k lruKey) {
	if u.lru == nil {
		u.evicted = append(u.evicted, k)
		return
	}
	u.lru.Add(k, struct{}{})
}

// forget takes k out of the LRU without evicting it: it is pinned again.
func (u *unrefLRU) forget(k lruKey) {
	if u.lru == nil {
		return
	}
	u.forgetting = true
	u.lru.Remove(k)
	u.forgetting = false
}

// take returns and clears what the bound pushed out.
func (u *unrefLRU) take() []lruKey {
	out := u.evicted
	u.evicted = nil
	return out
}
