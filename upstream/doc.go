// Package upstream is the relay's xDS client to its authoritative control
// planes.
//
// A Client serves one upstream authority (an ordered list of servers). It keeps
// one ADS stream, to the first reachable server in the list, that carries the
// union of the relay's subscriptions for every resource type. The relay
// (package relay) does the reference counting: it calls Subscribe and
// Unsubscribe only when a name gains its first or loses its last watcher, and
// receives what the server sends through a Handler.
//
// The Client speaks the state-of-the-world (SotW) and the incremental (Delta)
// variants of the protocol: it sends subscriptions, validates every response
// before handing it to the Handler, ACKs or NACKs it, reconnects with jittered
// backoff, resubscribes everything on a new stream, falls back to the next
// server when the current one is unreachable and returns to an earlier one
// as soon as it accepts connections again (gRFC A71).
//
// Concurrency: all Client methods are safe for concurrent use. The Handler is
// called from the client's goroutines one call at a time, updates in the
// order the server sent them; it may call Subscribe, Unsubscribe and Status,
// but must not call Close.
//
// Goroutines: New starts a run goroutine; while a stream is open it has a
// sender goroutine and, while connected to a fallback server, a probe
// goroutine. Close stops and waits for all of them.
package upstream
