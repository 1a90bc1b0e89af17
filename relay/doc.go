// Package relay is the heart of xds-relay: the cache of resource variants and
// the subscription registry that joins downstream interest to upstream
// subscriptions, and the Relay type that wires the upstream clients, the
// cache and the downstream server together.
//
// Data path: an upstream client hands an accepted response to the Relay
// (onUpdate); the Relay turns each resource into an immutable
// downstream.Resource (the upstream's bytes, a content-derived version),
// publishes a new immutable downstream.View of the type, and notifies the
// streams that watch a changed name (or the wildcard) — outside its lock, in
// order, on the fan-out goroutine (fanout.go). Streams build their
// responses from the View, encoded once per selection.
//
// Registry: each (type, name) is ref-counted by its watching streams. The
// first watcher subscribes it upstream; the last one leaving starts a linger
// timer, after which it is unsubscribed (with the names released in the same
// stream request: one timer, one upstream request). Its last value stays in the View,
// bounded by an LRU of unreferenced resources (cache.max_unreferenced), and
// is served at once when a client returns. Only what nothing pins enters the
// LRU: no stream watches it (by name, the wildcard or its glob collection)
// and no upstream subscription covers it. Nothing watched is ever evicted
// (lru.go; a refusal would be counted and logged).
//
// All methods are safe for concurrent use. What Relay.mu guards is a type,
// state, that only Relay.lock hands out: a method of *state (and of the
// scopes and type caches reached through it) runs with the lock held, and
// timers take the lock themselves. Lock order: Relay.mu → a downstream
// stream's mutex → an upstream client's mutex. Upstream callbacks run on the
// upstream clients' goroutines and take Relay.mu.
package relay
