package downstream

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Draining ends open streams with UNAVAILABLE so that their clients reconnect
// to another replica at once.
//
// Only a stream's handler can end it with a status of its own, by returning
// it, and the handler spends its life in RecvMsg, which nothing but the end of
// the stream interrupts: cancelling the stream's context would make RecvMsg
// return and grpc write CANCELLED itself (serverStream.RecvMsg writes the
// status of a failed receive), so the client would not see UNAVAILABLE. So
// the interceptor below runs the stream's handler in a goroutine of its own
// and waits for it, or for Drain: then it returns UNAVAILABLE while the
// handler is still blocked in RecvMsg. grpc writes UNAVAILABLE and ends the
// stream; the handler's RecvMsg then fails, grpc's own status for it comes
// too late to be sent, and the handler cleans up (its watches) as it does
// for any stream that ends. The price is one goroutine per stream, mostly a
// minimal stack, parked; the Server's Close waits for them.
//
// grpc forbids SendMsg after the handler returned, and the stream's sender is
// a pool worker. The interceptor wraps the stream so that SendMsg runs under a
// per-stream mutex; before returning UNAVAILABLE it marks the stream ended
// under that mutex (waiting, boundedly, for a SendMsg in flight to a slow
// reader), so that later sends fail without reaching grpc.

// drainKey is the context key of a stream's drainHandle.
type drainKey struct{}

// sendWait bounds how long the end of a drained stream waits for a send in
// flight (a client that does not read).
const sendWait = time.Second

// drainHandle is one stream as Drain sees it.
type drainHandle struct {
	// seq orders the streams for Drain (oldest first); set by add.
	seq uint64
	// drain is closed by end.
	drain   chan struct{}
	drained atomic.Bool

	mu    sync.Mutex // held by SendMsg
	ended bool       // guarded by mu: the interceptor returned
}

func newDrainHandle() *drainHandle { return &drainHandle{drain: make(chan struct{})} }

// end makes the stream's interceptor return UNAVAILABLE.
func (h *drainHandle) end() {
	if h.drained.CompareAndSwap(false, true) {
		close(h.drain)
	}
}

// finish marks the stream ended: no SendMsg starts after it. It waits up to
// sendWait for a SendMsg in flight.
func (h *drainHandle) finish() {
	deadline := time.Now().Add(sendWait)
	for !h.mu.TryLock() {
		if time.Now().After(deadline) {
			return // the send in flight fails when grpc ends the stream
		}
		time.Sleep(time.Millisecond)
	}
	h.ended = true
	h.mu.Unlock()
}

// drainStream guards SendMsg (see above).
type drainStream struct {
	grpc.ServerStream
	h *drainHandle
}

func (d *drainStream) SendMsg(m any) error {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	if d.h.ended {
		return status.Error(codes.Unavailable, "xds-relay: stream ended")
	}
	return d.ServerStream.SendMsg(m)
}

// drainer is the registry of open streams. Safe for concurrent use.
type drainer struct {
	handlers sync.WaitGroup // the handlers' goroutines

	mu      sync.Mutex
	next    uint64                    // guarded by mu
	streams map[*drainHandle]struct{} // guarded by mu
	// idle is closed when draining and no stream is left.
	idle chan struct{} // guarded by mu; nil until Drain
}

func (d *drainer) refusing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.idle != nil
}

func (d *drainer) add(h *drainHandle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	h.seq = d.next
	if d.streams == nil {
		d.streams = make(map[*drainHandle]struct{})
	}
	d.streams[h] = struct{}{}
	if d.idle != nil {
		h.end() // it got past the tap just before the drain began
	}
}

func (d *drainer) remove(h *drainHandle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.streams, h)
	d.closeIdleLocked()
}

func (d *drainer) closeIdleLocked() {
	if d.idle != nil && len(d.streams) == 0 {
		select {
		case <-d.idle:
		default:
			close(d.idle)
		}
	}
}

// intercept is the stream interceptor of every stream the tap admitted: it
// registers the stream for Drain and runs its handler (see above).
func (s *Server) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	h, ok := ss.Context().Value(drainKey{}).(*drainHandle)
	if !ok {
		return handler(srv, ss) // a server without the tap
	}
	s.drain.add(h)
	defer s.drain.remove(h)
	done := make(chan error, 1)
	s.drain.handlers.Go(func() { done <- handler(srv, &drainStream{ServerStream: ss, h: h}) })
	select {
	case err := <-done:
		h.finish()
		return err
	case <-h.drain:
		h.finish()
		return status.Error(codes.Unavailable, "xds-relay: draining, reconnect to another replica")
	}
}

// Drain ends every open stream with UNAVAILABLE, oldest first, spread evenly
// over window (0: all at once): the i-th of n streams is ended at
// i×window/n after the start, so the clients reconnect to the other replicas
// at an even pace instead of in a storm. New streams are refused with
// UNAVAILABLE from the start. Streams that end by themselves free their
// slot. Drain returns nil as soon as no stream is left, or ctx's error when
// ctx ends first, after ending every stream left at once. Drain is meant to
// run once; later calls end what is left at the same pace.
func (s *Server) Drain(ctx context.Context, window time.Duration) error {
	d := &s.drain
	d.mu.Lock()
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.closeIdleLocked()
	d.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// order are the streams to end, oldest first; order[i] has slot
	// base+i, base being the slots of the earlier snapshots.
	var order []*drainHandle
	base, next := 0, 0
	for {
		select {
		case <-idle:
			return nil
		case <-ctx.Done():
			s.endAll()
			return ctx.Err()
		case <-timer.C:
		}
		if next == len(order) {
			// The first round, or latecomers: a new snapshot, whose slots
			// follow the others'.
			base += len(order)
			order, next = d.snapshot(), 0
			if len(order) == 0 {
				timer.Reset(10 * time.Millisecond) // until the ended ones are gone
				continue
			}
		}
		n := base + len(order)
		elapsed := time.Since(start)
		for next < len(order) && (window <= 0 || elapsed >= slotTime(base+next, n, window)) {
			order[next].end()
			next++
		}
		wait := 10 * time.Millisecond
		if next < len(order) {
			wait = slotTime(base+next, n, window) - elapsed
		}
		timer.Reset(wait)
	}
}

// slotTime is when slot i of n is due in a drain over window.
func slotTime(i, n int, window time.Duration) time.Duration {
	return time.Duration(float64(window) * float64(i) / float64(n))
}

// snapshot returns the registered streams not yet ended, oldest first.
func (d *drainer) snapshot() []*drainHandle {
	d.mu.Lock()
	out := make([]*drainHandle, 0, len(d.streams))
	for h := range d.streams {
		if !h.drained.Load() {
			out = append(out, h)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b *drainHandle) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// endAll ends every open stream at once.
func (s *Server) endAll() {
	for _, h := range s.drain.snapshot() {
		h.end()
	}
}

// waitHandlers waits for the handlers of ended streams (Close).
func (d *drainer) waitHandlers() { d.handlers.Wait() }

// OpenStreams returns the number of open streams the tap admitted.
func (s *Server) OpenStreams() int {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	return len(s.drain.streams)
}
