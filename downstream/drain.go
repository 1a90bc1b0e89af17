package downstream

import (
	"context"
	"net"
	"slices"
	"sync"
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
// (Listener), for Drain. Safe for concurrent use.
type conns struct {
	mu   sync.Mutex
	next uint64                  // guarded by mu: accept order
	open map[*trackedConn]uint64 // guarded by mu: → accept order
	// idle is closed when draining and no connection is left.
	idle chan struct{} // guarded by mu; nil until Drain
}

// trackedConn is an accepted connection that leaves conns when closed.
type trackedConn struct {
	net.Conn
	cs   *conns
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.cs.remove(c) })
	return c.Conn.Close()
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
	tc := &trackedConn{Conn: c, cs: l.cs}
	if !l.cs.add(tc) {
		_ = c.Close() // accepted as the drain began
	}
	return tc, nil
}

// Listener wraps lis, the listener the grpc.Server serves this server on,
// so that Drain can end its connections.
func (s *Server) Listener(lis net.Listener) net.Listener {
	return &trackingListener{Listener: lis, cs: &s.conns}
}

// add registers c; false when draining (c is to be closed).
func (cs *conns) add(c *trackedConn) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.idle != nil {
		return false
	}
	if cs.open == nil {
		cs.open = make(map[*trackedConn]uint64)
	}
	cs.next++
	cs.open[c] = cs.next
	return true
}

func (cs *conns) remove(c *trackedConn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.open, c)
	cs.closeIdleLocked()
}

func (cs *conns) closeIdleLocked() {
	if cs.idle != nil && len(cs.open) == 0 {
		select {
		case <-cs.idle:
		default:
			close(cs.idle)
		}
	}
}

// draining reports whether Drain has begun: new streams are refused.
func (cs *conns) draining() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.idle != nil
}

// snapshot returns the open connections, oldest first.
func (cs *conns) snapshot() []*trackedConn {
	cs.mu.Lock()
	out := make([]*trackedConn, 0, len(cs.open))
	for c := range cs.open {
		out = append(out, c)
	}
	order := make(map[*trackedConn]uint64, len(out))
	for _, c := range out {
		order[c] = cs.open[c]
	}
	cs.mu.Unlock()
	slices.SortFunc(out, func(a, b *trackedConn) int { return int(order[a]) - int(order[b]) })
	return out
}

// Drain ends every open stream, by closing the connections of the
// server's Listener oldest first, spread evenly over window (0: all at
// once): the i-th of n is closed at i×window/n after the start, so that the
// clients reconnect to the other replicas at an even pace instead of in a
// storm. New streams are refused with UNAVAILABLE from the start (the
// caller sends GOAWAY and closes the listener: grpc.Server.GracefulStop).
// Drain returns nil as soon as no connection is left, or ctx's error when
// ctx ends first, after closing every connection left. Later calls close
// what is left at the same pace.
func (s *Server) Drain(ctx context.Context, window time.Duration) error {
	cs := &s.conns
	cs.mu.Lock()
	if cs.idle == nil {
		cs.idle = make(chan struct{})
	}
	idle := cs.idle
	cs.closeIdleLocked()
	cs.mu.Unlock()

	if err := closeSpread(ctx, idle, cs.snapshot(), window); err == nil {
		select {
		case <-idle:
			return nil
		case <-ctx.Done():
		}
	}
	for _, c := range cs.snapshot() {
		_ = c.Close()
	}
	return ctx.Err()
}

// CloseConns ends the streams open now, without refusing anything new (see
// SetRefusing for that): it closes the connections of the server's Listener
// that are open when it is called, oldest first, spread evenly over window
// as Drain does. It returns nil once they are closed, or ctx's error when
// ctx ends first, leaving the rest open.
func (s *Server) CloseConns(ctx context.Context, window time.Duration) error {
	return closeSpread(ctx, nil, s.conns.snapshot(), window)
}

// closeSpread closes order, the i-th of n at i×window/n after the start
// (0: all at once). It returns nil when all are closed or idle is closed
// (nil: never), and ctx's error when ctx ends first.
func closeSpread(ctx context.Context, idle <-chan struct{}, order []*trackedConn, window time.Duration) error {
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for next := 0; next < len(order); {
		select {
		case <-idle:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		elapsed := time.Since(start)
		for next < len(order) && (window <= 0 || elapsed >= slotTime(next, len(order), window)) {
			_ = order[next].Close()
			next++
		}
		if next < len(order) {
			timer.Reset(slotTime(next, len(order), window) - elapsed)
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
