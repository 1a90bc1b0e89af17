// Package downstream is xds-relay's xDS server: the Aggregated Discovery
// Service and the per-type discovery services, State-of-the-World and
// incremental (Delta), over one per-stream state machine.
//
// The server knows nothing of upstreams or caching. It asks a Source for the
// resources of the names a stream subscribes to; the Source answers with
// immutable Views and notifies each stream's Watcher when a View changes.
//
// # Data path
//
// A View is one type's resources at one moment. Responses are built from a
// View's pre-encoded resources and memoized on it, so every stream that needs
// the same response shares the same bytes; only the nonce is appended per
// stream (see codec.go). Each stream keeps an ordered queue of pending View
// changes (see queue.go): a newer change of one type replaces a queued one only
// where no other type's change lies between them, so updates leave in the
// order the Source produced them. A shared, bounded pool of sender goroutines
// drains the queues: besides the gRPC handler that reads requests there is no
// goroutine per stream, and none per push (Drain ends streams by closing
// their connections, see drain.go). A stream sends only while its client
// has acknowledged all but sendBudget of what it was sent, so no send blocks
// on a client that stopped reading: such a stream holds no sender, and its
// queue coalesces (bounded) until the client reads again. An ACK repeats
// its subscription's names: a SotW stream decodes them once and reuses them
// while their bytes do not change (see recvnames.go).
//
// # Concurrency
//
// Server methods are safe for concurrent use. A stream's state is guarded by
// its mutex; the lock order is Source lock → stream.mu. Watcher.Notify never
// blocks and never calls back into the Source. A function whose name ends
// in Locked is called with stream.mu held and returns with it held. Nothing
// is sent and no flush handed to the pool under it: flush sends between its
// two locked steps, and a request reports a canary's verdict and hands its
// change to the Source after the lock (finish). The names table's lock
// (recvnames.go) is a leaf, taken by a handler with no other lock held.
//
// # Files
//
// server.go, stream.go and typestate.go hold the server, a stream and its
// per-type state; sotw.go and delta.go read requests (recvnames.go decodes
// SotW ones); sotw_build.go and delta_build.go build responses; flush.go
// queues and sends them; ack.go tracks what the client acknowledged;
// request.go checks and commits a request; mbb.go (make before break) and
// transitions.go decide which removals a stream withholds.
package downstream
