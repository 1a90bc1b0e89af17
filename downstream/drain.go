package downstream

import (
	"cmp"
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Draining ends the open streams so that their clients reconnect to another
// replica, at an even pace.
//
// A stream's handler spends its life in RecvMsg, which nothing but the end
// of the stream interrupts, and grpc gives no way to end a stream with a
// status from outside its handler. Closing the stream's connection does end
// it: the client's grpc sees the transport close and fails the stream with
// UNAVAILABLE (grpc-go, grpc-js and C-core alike), which every xDS client
// answers by reconnecting — to another replica, since the relay also sent
// GOAWAY and closed its listener (Drain), or refuses its new streams while
// it is out of readiness (SetRefusing, CloseConns). So Drain and CloseConns
// close the connections, oldest first, spread over the drain window; the
// handlers end as for any connection that goes away. Nothing per stream is
// needed: no goroutine, no guard on SendMsg.

// conns tracks the connections of the listener the server serves
// (Listener), for Drain and the connection gauge. Safe for concurrent use.
//
// Listener hands grpc the accepted *net.TCPConn (or *net.UnixConn) itself:
// grpc-go reads those through pooled buffers it holds only while a read
// lasts, and keeps a 4 KiB bufio.Reader for the life of any other net.Conn
// (grpc/internal/transport.bufferedReader), a wrapper included. So no Close
// method tells conns when grpc is done with a connection; it learns it when
// it looks (prune): grpc closes every connection it is done with, and a
// closed connection's RawConn.Control fails, since it guarantees the
// descriptor valid while its function runs. Other connections (a listener
// of tests, say) gain nothing from grpc and are wrapped (trackedConn).
type conns struct {
	mu     sync.Mutex
	next   uint64              // guarded by mu: accept order
	open   map[net.Conn]uint64 // guarded by mu: accepted, closed since when not pruned yet → accept order
	pruned int                 // guarded by mu: len(open) after the last prune
	drain  bool                // guarded by mu: Drain has begun
}

// pruneSlack is how many connections add registers beyond twice the open
// ones of the last prune before it prunes again: pruning costs O(1) per
// accept, amortized, and at most twice the open connections stay tracked.
const pruneSlack = 64

// idlePoll is how often Drain looks whether connections it has not closed
// yet were closed by their clients (closeSpread, waitIdle).
const idlePoll = 25 * time.Millisecond

// trackedConn is an accepted connection that grpc reads through a
// bufio.Reader anyway; it records its Close, which RawConn cannot tell.
type trackedConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *trackedConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// isClosed reports whether c, registered by add, was closed.
func isClosed(c net.Conn) bool {
	if tc, ok := c.(*trackedConn); ok {
		return tc.closed.Load()
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	return err != nil || raw.Control(func(uintptr) {}) != nil
}

// trackingListener registers every accepted connection in conns.
type trackingListener struct {
	net.Listener
	cs *conns
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn: // the types grpc reads without a bufio.Reader
	default:
		c = &trackedConn{Conn: c}
	}
	if !l.cs.add(c) {
		_ = c.Close() // accepted as the drain began
	}
	return c, nil
}

// Listener wraps lis, the listener the grpc.Server serves this server on,
// so that Drain can end its connections and OpenConns count them. The
// connections it accepts are lis's own *net.TCPConn (see conns).
func (s *Server) Listener(lis net.Listener) net.Listener {
	return &trackingListener{Listener: lis, cs: &s.conns}
}

// OpenConns returns the number of open connections of the server's
// Listener (xds_relay_downstream_connections): accepted and not closed yet.
func (s *Server) OpenConns() int {
	return s.conns.count()
}

// add registers c; false when draining (c is to be closed).
func (cs *conns) add(c net.Conn) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.drain {
		return false
	}
	if cs.open == nil {
		cs.open = make(map[net.Conn]uint64)
	}
	if len(cs.open) >= 2*cs.pruned+pruneSlack {
		cs.pruneLocked()
	}
	cs.next++
	cs.open[c] = cs.next
	return true
}

// pruneLocked forgets the connections closed since they were registered.
func (cs *conns) pruneLocked() {
	for c := range cs.open {
		if isClosed(c) {
			delete(cs.open, c)
		}
	}
	cs.pruned = len(cs.open)
}

// count returns the number of open connections.
func (cs *conns) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.pruneLocked()
	return len(cs.open)
}

// draining reports whether Drain has begun: new streams are refused.
func (cs *conns) draining() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.drain
}

// snapshot returns the open connections, oldest first.
func (cs *conns) snapshot() []net.Conn {
	type entry struct {
		c     net.Conn
		order uint64
	}
	cs.mu.Lock()
	cs.pruneLocked()
	es := make([]entry, 0, len(cs.open))
	for c, order := range cs.open {
		es = append(es, entry{c, order})
	}
	cs.mu.Unlock()
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.order, b.order) })
	out := make([]net.Conn, len(es))
	for i, e := range es {
		out[i] = e.c
	}
	return out
}

// Drain ends every open stream, by closing the connections of the
// server's Listener oldest first, spread evenly over window (0: all at
// once): the i-th of n is closed at i×window/n after the start, so that the
// clients reconnect to the other replicas at an even pace instead of in a
// storm. New streams are refused with UNAVAILABLE from the start (the
// caller sends GOAWAY and closes the listener: grpc.Server.GracefulStop).
// Drain returns nil as soon as no connection is left (within idlePoll when
// the last ones were closed by their clients), or ctx's error when ctx ends
// first, after closing every connection left. Later calls close what is
// left at the same pace.
func (s *Server) Drain(ctx context.Context, window time.Duration) error {
	cs := &s.conns
	cs.mu.Lock()
	cs.drain = true
	cs.mu.Unlock()

	if err := cs.closeSpread(ctx, cs.snapshot(), window, true); err == nil {
		if err := cs.waitIdle(ctx); err == nil {
			return nil
		}
	}
	for _, c := range cs.snapshot() {
		_ = c.Close()
	}
	return ctx.Err()
}

// waitIdle returns nil when no connection is left, or ctx's error when ctx
// ends first.
func (cs *conns) waitIdle(ctx context.Context) error {
	tick := time.NewTicker(idlePoll)
	defer tick.Stop()
	for cs.count() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// CloseConns ends the streams open now, without refusing anything new (see
// SetRefusing for that): it closes the connections of the server's Listener
// that are open when it is called, oldest first, spread evenly over window
// as Drain does. It returns nil once they are closed, or ctx's error when
// ctx ends first, leaving the rest open.
func (s *Server) CloseConns(ctx context.Context, window time.Duration) error {
	return s.conns.closeSpread(ctx, s.conns.snapshot(), window, false)
}

// closeSpread closes order, the i-th of n at i×window/n after the start
// (0: all at once). It returns nil when all are closed or, untilIdle, no
// connection is left (looked at every idlePoll at least), and ctx's error
// when ctx ends first.
func (cs *conns) closeSpread(ctx context.Context, order []net.Conn, window time.Duration, untilIdle bool) error {
	start := time.Now()
	looked := start // when untilIdle last counted the connections
	timer := time.NewTimer(0)
	defer timer.Stop()
	for next := 0; next < len(order); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		if untilIdle && time.Since(looked) >= idlePoll {
			if looked = time.Now(); cs.count() == 0 {
				return nil
			}
		}
		elapsed := time.Since(start)
		for next < len(order) && (window <= 0 || elapsed >= slotTime(next, len(order), window)) {
			_ = order[next].Close()
			next++
		}
		if next < len(order) {
			wait := slotTime(next, len(order), window) - elapsed
			if untilIdle {
				wait = min(wait, idlePoll)
			}
			timer.Reset(wait)
		}
	}
	return nil
}

// slotTime is when slot i of n is due in a drain over window.
func slotTime(i, n int, window time.Duration) time.Duration {
	return time.Duration(float64(window) * float64(i) / float64(n))
}

// OpenStreams returns the number of open streams.
func (s *Server) OpenStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}
