package relay

import (
	"fmt"
	"time"

	"github.com/xds-relay/xds-relay/downstream"
)

// entry is what the relay knows of one name of a type besides the View, and
// why — as grpc-go keeps one resourceState per resource. A typeCache keys
// its entries as its View: a name, a subscription key with TP2 parameters,
// a glob collection or the wildcard. An entry exists only while something is
// in it: whatever clears a field calls typeCache.tidy.
type entry struct {
	// word is what the relay knows of the name's value or error in the
	// View, and why: the upstream's word (or nothing yet), an unsure value
	// or the relay's own error — one place, one state (see word).
	word word
	// wait is the wait for the upstream's word on a subscribed name the
	// cache knows nothing of (armUnknown): one it has no value, absence or
	// error of, an unsure value or the relay's own error. It runs beside
	// word, as the relay waits in each of those. Set by armUnknown; cleared
	// when it fires, when the upstream confirms the name (confirmed), when
	// the name is subscribed again (ref) and when its authority connects
	// (rearmUnknown, which starts it again). Shared with the names armed
	// with it (unknownWait).
	wait *unknownWait
	// halted is the version of the name whose guarded rollout halted: the
	// upstream sending it again does not start another rollout. Set when a
	// rollout halts (rollout.go); cleared when the upstream sends another
	// version (holdHalted).
	halted string
	// noCache: the upstream marked the name do_not_cache (nocache.go). Set
	// when such a resource arrives; cleared when its upstream subscription
	// ends (expire, dropNow).
	noCache bool
	// ttl is the expiry of a resource the upstream gave a TTL (ttl.go). Set
	// and cleared by armTTL (each update or heartbeat starts it again); it
	// ends itself when it fires.
	ttl *time.Timer
	// variantMode: the name's View entries (its plain name and its keys
	// with parameters) are selections from variants (TP2, variants.go),
	// even while none is stored. Set when the name gets a constrained
	// variant or a key with parameters (enterVariantMode); cleared when
	// neither is left (resolveVariants, dropParamKey, eviction).
	variantMode bool
	// variants are the stored variants of a name in variant mode. Any other
	// name's View entry is its only variant.
	variants []variant
	// params holds the name's subscription keys with parameters, each
	// with its parameters. Set by addParamKey at a key's first watcher;
	// cleared by dropParamKey once nothing watches or caches the key.
	params map[string]map[string]string
	// listedAbsent: the default servers listed the name, another
	// authority's, while a subscription of its authority covered it, and
	// the authority's word held over the listing: it said the name was
	// gone (listsAbsent), or its copy replaced the listing kept aside
	// (settleAside). Set then; cleared when its glob's subscription ends
	// (forgetGlobSet asks them again).
	listedAbsent bool
	// aside is the default servers' latest listing of another authority's
	// name, received while one of the authority's subscriptions covered
	// the name and the authority's word was in doubt (see aside.go): the
	// two streams are not ordered, so it may be older than the authority's
	// copy, which stays. Set by applier.resource; settleAside alone decides
	// what becomes of it.
	aside *downstream.Resource
}

// word is what the relay knows of a name's value or error in the View, and
// why. A name is in one word at a time; its transitions are typeCache's
// confirmed, markUnsure, clearUnsure, markUnreachable and clearUnreachable.
type word uint8

const (
	// wordHeard (the zero value): what the View holds of the name — its
	// value, its absence, its error — is the upstream's word, or the View
	// holds nothing of it (the wait, if one runs, says the relay asked).
	// Entered from wordUnsure by confirmed (the upstream sent the name on a
	// subscription that covers it, or a new Delta stream's server was told
	// the relay holds it) and when the value leaves (clearUnsure); from
	// wordUnreachable when the relay's own error leaves (clearUnreachable).
	wordHeard word = iota
	// wordUnsure: the cached value is served but not trusted. The name's
	// upstream subscription ended and the upstream has not sent it since,
	// or it came from the warm-restart file, or a new Delta stream's server
	// was not told the relay holds it: the upstream may no longer tell the
	// relay of it (a Delta server forgets what was unsubscribed; a SotW
	// server's silence on a name subscribed later on the stream proves
	// nothing at once), so when it is subscribed again the relay has the
	// upstream confirm it where it can (upstream.Client.Forget), and until
	// it speaks it stays — its silence (the wait) removes nothing a client
	// may hold. Entered by markUnsure, only for a cached name; left by
	// confirmed, and wherever the cached value leaves (clearUnsure): the
	// upstream's word that it is gone (deleted, remove), silence (silent),
	// eviction, a TTL expiry, a do_not_cache drop and a TP2 selection that
	// ends (resolveVariants).
	wordUnsure
	// wordUnreachable: the name's error in the View is the relay's own
	// UNAVAILABLE (no upstream server of its authority is reachable), not
	// the upstream's word. Entered by markUnreachable when the wait fires
	// while the authority is away and nothing is cached; left
	// (clearUnreachable) when the upstream speaks of the name (a resource,
	// an error, a deletion, its silence: silent; for a key with TP2
	// parameters, a variant's error or selection) and when its
	// subscription ends (expire). The wait runs on meanwhile.
	wordUnreachable
)

// unsure reports whether the name's cached value is unsure (wordUnsure).
func (e entry) unsure() bool { return e.word == wordUnsure }

// unreachable reports whether the name's error is the relay's own
// UNAVAILABLE (wordUnreachable).
func (e entry) unreachable() bool { return e.word == wordUnreachable }

// isEmpty reports whether nothing is left in e.
func (e *entry) isEmpty() bool {
	return e.word == wordHeard && e.wait == nil && e.halted == "" && !e.noCache && e.ttl == nil &&
		!e.variantMode && e.variants == nil && len(e.params) == 0 && !e.listedAbsent &&
		e.aside == nil
}

// get returns what the relay knows of name, the zero entry for nothing. It
// is a copy: changes go through entry.
func (tc *typeCache) get(name string) entry {
	if e := tc.names[name]; e != nil {
		return *e
	}
	return entry{}
}

// entry returns name's entry to change, made if there is none. A change
// that clears a field is followed by tidy.
func (tc *typeCache) entry(name string) *entry {
	e := tc.names[name]
	if e == nil {
		if tc.names == nil {
			tc.names = make(map[string]*entry)
		}
		e = &entry{}
		tc.names[name] = e
	}
	return e
}

// tidy deletes name's entry if nothing is left in it.
func (tc *typeCache) tidy(name string) {
	if e := tc.names[name]; e != nil && e.isEmpty() {
		delete(tc.names, name)
	}
}

// checkEntries has Relay.Close check that no scope holds an empty entry —
// that every change that clears a field tidies — nor an unsure name whose
// value left. The package's tests set it (export_test.go).
var checkEntries bool

// mustHaveNoEmptyEntries panics if a type of sc holds an empty entry, or
// a name unsure with no cached value.
func (sc *scope) mustHaveNoEmptyEntries() {
	for _, tc := range sc.types {
		for name, e := range tc.names {
			if e.isEmpty() {
				panic(fmt.Sprintf("relay: scope %q type %s: empty entry %q", sc.key, tc.typeURL, name))
			}
			if _, cached := tc.view.Resources[name]; e.unsure() && !cached {
				panic(fmt.Sprintf("relay: scope %q type %s: %q unsure with no cached value", sc.key, tc.typeURL, name))
			}
		}
	}
}

// stopTimers stops tc's waits and TTL expiries.
func (tc *typeCache) stopTimers() {
	for _, e := range tc.names {
		if e.wait != nil {
			e.wait.timer.Stop()
		}
		if e.ttl != nil {
			e.ttl.Stop()
		}
	}
}
