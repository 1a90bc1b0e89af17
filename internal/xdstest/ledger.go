package xdstest

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// The ledger records, for every Upstream a test has running, when it first
// served each content of each resource and when each resource last went
// missing, so that a client can check every response it gets: a resource it
// is told is gone (a Delta removal, an omission from a SotW LDS/CDS
// response) must have been missing upstream at some point since the content
// the client holds was first served. A cache may lag behind the upstream —
// forward an older state, then a newer one — but it must never invent a
// removal.

type ledgerEntry struct {
	present     map[string]map[string]bool                   // type → name → served now
	firstServed map[string]map[string]map[[32]byte]time.Time // type → name → content hash → first served
	wentMissing map[string]map[string]time.Time              // type → name → last time it went missing
}

var ledger = struct {
	mu   sync.Mutex
	live map[*Upstream]*ledgerEntry
}{live: map[*Upstream]*ledgerEntry{}}

// record notes what u serves now (every snapshot key together). Called with
// u.snapMu held.
func (u *Upstream) record() {
	now := time.Now()
	next := map[string]map[string]bool{}
	hashes := map[string]map[string][32]byte{}
	for _, res := range u.contents {
		for typeURL, rs := range res {
			if next[typeURL] == nil {
				next[typeURL], hashes[typeURL] = map[string]bool{}, map[string][32]byte{}
			}
			for _, r := range rs {
				b, err := cache.MarshalResource(r)
				if err != nil {
					continue
				}
				name := cache.GetResourceName(r)
				next[typeURL][name] = true
				hashes[typeURL][name] = sha256.Sum256(b)
			}
		}
	}
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	e := ledger.live[u]
	if e == nil {
		e = &ledgerEntry{firstServed: map[string]map[string]map[[32]byte]time.Time{},
			wentMissing: map[string]map[string]time.Time{}}
		ledger.live[u] = e
	}
	for typeURL, names := range e.present {
		for name := range names {
			if !next[typeURL][name] {
				if e.wentMissing[typeURL] == nil {
					e.wentMissing[typeURL] = map[string]time.Time{}
				}
				e.wentMissing[typeURL][name] = now
			}
		}
	}
	for typeURL, hs := range hashes {
		if e.firstServed[typeURL] == nil {
			e.firstServed[typeURL] = map[string]map[[32]byte]time.Time{}
		}
		for name, h := range hs {
			if e.firstServed[typeURL][name] == nil {
				e.firstServed[typeURL][name] = map[[32]byte]time.Time{}
			}
			if _, ok := e.firstServed[typeURL][name][h]; !ok {
				e.firstServed[typeURL][name][h] = now
			}
		}
	}
	e.present = next
}

// forget drops u from the ledger (at the end of its test).
func (u *Upstream) forget() {
	ledger.mu.Lock()
	delete(ledger.live, u)
	ledger.mu.Unlock()
}

// PhantomLoss reports whether telling a client that holds name of typeURL
// with content hash (the SHA-256 of the resource's bytes) that it is gone
// is a removal no upstream made: some running test Upstream serves the type,
// and none that ever served that content has been without the name since it
// first did.
func PhantomLoss(typeURL, name string, hash [32]byte) bool {
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	served := false
	for _, e := range ledger.live {
		if _, ok := e.present[typeURL]; !ok {
			continue
		}
		served = true
		first, ok := e.firstServed[typeURL][name][hash]
		if !ok {
			continue // another upstream's content
		}
		if !e.present[typeURL][name] || e.wentMissing[typeURL][name].After(first) {
			return false // it went missing since: the client may be told so, late
		}
	}
	return served
}
