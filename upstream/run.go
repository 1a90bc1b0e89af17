package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// adsStream is one open ADS stream, SotW or Delta.
type adsStream interface {
	// flush sends every pending request. Only called from the sender
	// goroutine.
	flush() error
	// recvLoop receives and handles responses until the stream fails. It
	// reports whether at least one response arrived. Only called from the run
	// goroutine.
	recvLoop() (received bool, err error)
}

// switchError cancels a stream to a fallback server when server number to is
// reachable again.
type switchError struct{ to int }

func (e switchError) Error() string        { return errSwitch.Error() }
func (e switchError) Is(target error) bool { return target == errSwitch }

// run owns the connection: it waits for a first subscription (unless Eager),
// then keeps a stream open to the first reachable server, with backoff
// between rounds.
//
// Server choice (gRFC A71): after a failed attempt the next server is tried at
// once; after the last one, the first one again after a backoff. A stream that
// received a response resets the backoff, and when it breaks the first server
// is tried again.
func (c *Client) run() {
	defer close(c.done)
	if len(c.cfg.Servers) == 0 {
		c.setState("", StateIdle, errors.New("upstream: no servers configured"))
		c.log.Error("no upstream servers configured")
		<-c.ctx.Done()
		return
	}
	idx, attempt := 0, 0
	for {
		if !c.waitInterest() {
			return
		}
		uri := c.cfg.Servers[idx].URI
		received, err := c.attempt(idx)
		if c.ctx.Err() != nil {
			return
		}
		c.disconnected(uri, err)

		var sw switchError
		switch {
		case errors.As(err, &sw):
			idx, attempt = sw.to, 0
			continue
		case received:
			// xDS: the backoff resets after a response was received.
			idx, attempt = 0, 0
		case idx+1 < len(c.cfg.Servers):
			idx++ // fall back to the next server at once
			continue
		default:
			idx = 0
		}
		d := c.backoff(attempt)
		attempt++
		c.setState(uri, StateBackoff, nil)
		c.log.Debug("backing off", zap.Duration("wait", d), zap.Int("attempt", attempt))
		t := time.NewTimer(d)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// waitInterest blocks while nothing is subscribed (unless Config.Eager). It
// returns false when the client is closed.
func (c *Client) waitInterest() bool {
	for {
		if c.ctx.Err() != nil {
			return false
		}
		c.mu.Lock()
		ok := c.cfg.Eager || c.hasInterestLocked()
		if !ok {
			c.state = StateIdle
		}
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.ctx.Done():
			return false
		case <-c.wake:
		}
	}
}

// disconnected records the end of an attempt and tells the Handler when a
// connection it was told about is gone.
func (c *Client) disconnected(uri string, err error) {
	c.setState(uri, StateConnecting, err)
	if c.connected == "" {
		c.log.Warn("upstream attempt failed", zap.String("server", uri), zap.Error(err))
		return
	}
	prev := c.connected
	c.connected = ""
	c.log.Info("disconnected from upstream", zap.String("server", prev), zap.Error(err))
	c.h.OnState(prev, false, err)
}

// dialOptions returns the defaults for server idx followed by
// Config.DialOptions.
func (c *Client) dialOptions(idx int) []grpc.DialOption {
	srv := c.cfg.Servers[idx]
	creds := srv.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize)),
	}
	for _, cc := range srv.CallCreds {
		opts = append(opts, grpc.WithPerRPCCredentials(cc))
	}
	return append(opts, c.cfg.DialOptions...)
}

// attempt connects to server idx and runs streams on that connection until
// one fails. A fresh connection per attempt keeps grpc's own reconnect
// backoff out of the way of ours.
func (c *Client) attempt(idx int) (bool, error) {
	uri := c.cfg.Servers[idx].URI
	c.setState(uri, StateConnecting, nil)
	conn, err := grpc.NewClient(uri, c.dialOptions(idx)...)
	if err != nil {
		return false, fmt.Errorf("upstream: dial %s: %w", uri, err)
	}
	defer conn.Close()
	mode := c.cfg.Mode
	if m := c.cfg.Servers[idx].Mode; m != ModeAuto {
		mode = m
	}
	answered := false
	for {
		delta := mode == ModeDelta || (mode == ModeAuto && !c.sotwOnly[idx])
		received, err := c.runStream(conn, idx, delta)
		answered = answered || received
		if delta && mode == ModeAuto && !received && status.Code(err) == codes.Unimplemented {
			c.sotwOnly[idx] = true
			c.log.Info("upstream has no Delta xDS, using SotW", zap.String("server", uri))
			continue
		}
		if errors.Is(err, errResync) && c.ctx.Err() == nil {
			continue // resync.go: a new stream at once, on the same connection
		}
		return answered, err
	}
}

// runStream opens one ADS stream on conn and serves it until it fails or the
// client closes.
func (c *Client) runStream(conn *grpc.ClientConn, idx int, delta bool) (received bool, err error) {
	uri := c.cfg.Servers[idx].URI
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)

	mode := ModeSotW
	if delta {
		mode = ModeDelta
	}
	c.mu.Lock()
	c.mode = mode
	c.mu.Unlock()

	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	var s adsStream
	if delta {
		st, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			return false, fmt.Errorf("upstream: open delta stream to %s: %w", uri, err)
		}
		s = &deltaStream{c: c, server: uri, stream: st}
	} else {
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			return false, fmt.Errorf("upstream: open stream to %s: %w", uri, err)
		}
		s = &sotwStream{c: c, server: uri, stream: st}
	}

	c.mu.Lock()
	c.resetForStreamLocked()
	c.server, c.state = uri, StateConnected
	c.mu.Unlock()
	if c.connected != uri {
		c.connected = uri
		c.log.Info("connected to upstream", zap.String("server", uri), zap.Stringer("mode", mode))
		c.h.OnState(uri, true, nil)
	}

	var wg sync.WaitGroup
	wg.Go(func() { c.sendLoop(ctx, cancel, s, uri, delta) })
	if idx > 0 {
		wg.Go(func() { c.probe(ctx, cancel, idx) })
	}
	received, err = s.recvLoop()
	cancel(nil)
	wg.Wait()

	// A failed send or a switch to an earlier server cancelled the stream;
	// report that rather than the cancellation Recv saw.
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return received, err
}

// sendLoop is the stream's only sender: it flushes the pending requests each
// time it is woken, and settles what the server left unanswered when its
// wait is over (settle.go).
func (c *Client) sendLoop(ctx context.Context, cancel context.CancelCauseFunc, s adsStream, server string, delta bool) {
	settle := time.NewTimer(time.Hour)
	defer settle.Stop()
	for {
		if err := s.flush(); err != nil {
			// grpc: after io.EOF the stream's status comes from Recv.
			if !errors.Is(err, io.EOF) {
				cancel(err)
			}
			return
		}
		d, pending := c.nextSettle()
		if !pending {
			d = time.Hour
		}
		if r, due := c.resyncWait(); due {
			if r <= 0 {
				c.startResync(server)
				cancel(errResync)
				return
			}
			d = min(d, r)
		}
		settle.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-settle.C:
			c.settleDue(server, delta)
		}
	}
}

// probe runs while connected to fallback server idx: every retry interval it
// checks the earlier servers and, when one is reachable, cancels the stream
// so that run switches back to it (gRFC A71).
func (c *Client) probe(ctx context.Context, cancel context.CancelCauseFunc, idx int) {
	t := time.NewTicker(c.retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for j := range idx {
			if c.reachable(ctx, j) {
				c.log.Info("earlier upstream reachable again", zap.String("server", c.cfg.Servers[j].URI))
				cancel(switchError{to: j})
				return
			}
		}
	}
}

// reachable reports whether a connection to server idx becomes ready.
func (c *Client) reachable(ctx context.Context, idx int) bool {
	uri := c.cfg.Servers[idx].URI
	conn, err := grpc.NewClient(uri, c.dialOptions(idx)...)
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, min(c.retry, DefaultPrimaryRetryInterval))
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.TransientFailure, connectivity.Shutdown:
			return false
		}
		if !conn.WaitForStateChange(ctx, s) {
			return false
		}
	}
}
