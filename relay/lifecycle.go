package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/upstream"
)

// Serve serves downstream xDS on lis until Shutdown, StopServing or Close;
// it returns nil then.
func (r *Relay) Serve(lis net.Listener) error {
	r.serving.Store(true)
	r.updateHealth()
	defer r.updateHealth()
	defer r.serving.Store(false)
	if err := r.grpc.Serve(r.ds.Listener(lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("relay: serve: %w", err)
	}
	return nil
}

// Ready reports whether the relay is ready for clients (see Readiness).
func (r *Relay) Ready() bool {
	ok, _ := r.Readiness()
	return ok
}

// Readiness says whether the relay is ready for clients, and why (the body
// of /readyz and the gRPC health status): it is not draining (StartDrain)
// nor shutting down, its xDS listener serves, and its cache is
// warm — an upstream server has spoken xDS to it since it started
// (syncHook), or it loaded a warm-restart file (unless
// readiness.require_sync).
// A cold relay that cannot reach its control plane stays unready, so that
// during an outage a rolling update keeps clients on the warm replicas.
func (r *Relay) Readiness() (ready bool, reason string) {
	switch {
	case r.draining.Load():
		return false, "draining: xDS streams are being moved to other replicas"
	case r.maint.on.Load():
		return false, "draining (POST /drain; DELETE /drain ends it): xDS streams are being moved to other replicas"
	case !r.serving.Load():
		return false, "starting: the xDS listener does not serve yet"
	case r.synced.Load():
		return true, "ready: serving, synced with an upstream"
	case r.warm.Load() && !r.cfg.Readiness.RequireSync:
		return true, fmt.Sprintf("ready: serving from the warm-restart file %s; no upstream reached yet", r.cfg.Cache.PersistPath)
	case r.warm.Load():
		return false, "not synced: no upstream server reached yet (readiness.require_sync: the warm-restart file does not count)"
	}
	return false, "not synced: no upstream server reached yet, and no warm-restart file loaded"
}

// Draining reports whether the relay drains: StartDrain, or for good
// (Shutdown, StopServing or Close).
func (r *Relay) Draining() bool { return r.draining.Load() || r.maint.on.Load() }

// StopServing takes the relay out of service for good, the first half of
// Shutdown: readiness turns false, clients get GOAWAY, and the connections
// of the xDS listener are closed oldest first over shutdown.drain_window,
// so that their streams end with UNAVAILABLE and the clients reconnect to
// the other replicas at an even pace; held REST polls are answered 503 and
// the REST listener closes. Serve and ServeREST return; the upstreams stay
// up until Close. It returns a channel closed when no connection is left.
// Only the first call starts it; later ones return the same channel.
func (r *Relay) StopServing() <-chan struct{} {
	r.drainOnce.Do(func() {
		r.draining.Store(true)
		r.health.Shutdown() // NOT_SERVING from now on, whatever else changes
		window := r.cfg.Shutdown.DrainWindow
		if r.life.Err() == nil { // not Close
			r.log.Info("draining", zap.Duration("drain_window", window), zap.Int("streams", r.ds.OpenStreams()))
		}
		done := make(chan struct{})
		r.drainDone = done
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			r.grpc.GracefulStop() // GOAWAY; returns when every connection is gone
		}()
		restClosed := make(chan struct{})
		go func() {
			defer close(restClosed)
			// Held polls are answered at once: the shutdown takes a moment.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r.closeDialects(ctx)
		}()
		go func() {
			defer close(done)
			_ = r.ds.Drain(r.life, window) // cut short by Close
			<-stopped
			<-restClosed
		}()
	})
	return r.drainDone
}

// Shutdown drains and stops (docs/INTERFACE.md, "Shutdown"): readiness turns false
// at once, clients get GOAWAY, the open xDS streams are ended with
// UNAVAILABLE spread over shutdown.drain_window, and the relay stops as soon
// as none is left — or when ctx ends, ending the rest at once. Then the
// upstreams close (the load aggregated since the last upstream LRS report
// flushed first, at most 1 s) and the warm-restart file is written.
func (r *Relay) Shutdown(ctx context.Context) {
	r.closeDialects(ctx) // held REST polls are answered; the REST listener closes
	select {
	case <-r.StopServing():
	case <-ctx.Done():
		r.log.Warn("drain deadline passed: closing the remaining streams", zap.Int("streams", r.ds.OpenStreams()))
	}
	r.Close()
}

// Close stops everything at once: downstream streams end, upstream streams
// close, and every goroutine of the relay has returned when it returns.
func (r *Relay) Close() {
	r.draining.Store(true)
	r.endLife()
	// Held REST polls are answered at once; give them that moment.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r.closeDialects(ctx)
	cancel()
	r.grpc.Stop()
	<-r.StopServing() // over at once: its context is cancelled and grpc stopped
	r.maint.wait()
	r.ds.Close()
	r.fan.close()
	r.dx.gw.Close()  // its upstream streams and forwarder, after the gRPC server stopped
	r.dx.lrs.Close() // flushes the interval in flight (bounded), after the gRPC server stopped
	s := r.lock()
	if s.closed {
		s.unlock()
		return
	}
	s.closed = true
	var clients []*upstream.Client
	for _, sc := range s.scopes {
		if checkEntries {
			sc.mustHaveNoEmptyEntries()
		}
		clients = append(clients, s.stopScope(sc)...)
	}
	s.unlock()
	for _, c := range clients {
		c.Close()
	}
	if r.persist != nil {
		r.persist.close()
	}
	r.creds.close()
}

// syncAfter is how long an upstream stream must stay open, unanswered, for
// the server to count as speaking xDS: one that does not ends every stream
// at once (Unimplemented).
const syncAfter = time.Second

// syncHook is the upstream.Handler of every upstream client: it marks the
// relay synced once an upstream speaks xDS — it answered, or kept a stream
// open for syncAfter (an idle server answers nothing it is not asked).
type syncHook struct{ *upstreamHandler }

func (h syncHook) OnState(server string, connected bool, err error) {
	stream := h.streams.Add(1) // each state change starts another stream's count
	if connected && !h.r.synced.Load() {
		time.AfterFunc(syncAfter, func() {
			if h.streams.Load() == stream && h.r.life.Err() == nil {
				h.markSynced(server)
			}
		})
	}
	h.upstreamHandler.OnState(server, connected, err)
}

func (h syncHook) OnUpdate(u upstream.Update) error {
	if u.Event != upstream.Settle {
		h.markSynced(u.Server) // the server answered
	}
	return h.upstreamHandler.OnUpdate(u)
}

// markSynced marks the relay synced with an upstream, once.
func (h syncHook) markSynced(server string) {
	if !h.r.synced.Swap(true) {
		h.r.log.Info("synced with an upstream", zap.String("authority", h.authority), zap.String("server", server))
		h.r.updateHealth()
	}
}

// upstreamConnected returns the samples of xds_relay_upstream_connected: per
// authority, server and kind of scope, the streams connected. Every default
// server of the shared scope has a sample from the start, 0 until it
// connects; an authority's client of the shared scope (dialled at its first
// subscription) has one, 0, for the server it tries while it has never
// connected or is reconnecting, so that an unreachable authority is seen
// (alert XdsRelayUpstreamDisconnected) and not just absent.
func (r *Relay) upstreamConnected() []metrics.UpstreamConn {
	type key struct{ auth, server, scope string }
	counts := map[key]int{}
	for _, s := range r.cfg.Upstream.XDSServers {
		counts[key{"", s.ServerURI, metrics.ScopeShared}] = 0
	}
	s := r.lock()
	for _, sc := range s.scopes {
		kind := scopeKind(sc.key)
		for auth, c := range sc.upstreams {
			state, server := c.State()
			switch {
			case state == upstream.StateConnected:
				counts[key{auth, server, kind}]++
			case kind == metrics.ScopeShared && state != upstream.StateIdle && server != "":
				if k := (key{auth, server, kind}); !hasKey(counts, k) {
					counts[k] = 0 // present, 0: trying
				}
			}
		}
	}
	s.unlock()
	out := make([]metrics.UpstreamConn, 0, len(counts))
	for k, n := range counts {
		out = append(out, metrics.UpstreamConn{Authority: k.auth, Server: k.server, Scope: k.scope, Streams: n})
	}
	slices.SortFunc(out, func(a, b metrics.UpstreamConn) int {
		return strings.Compare(a.Authority+"\x00"+a.Server+"\x00"+a.Scope, b.Authority+"\x00"+b.Server+"\x00"+b.Scope)
	})
	return out
}

// upstreamFallback returns the samples of xds_relay_upstream_fallback: per
// authority and kind of scope, whether an upstream client is on a server
// that is not the first of its list. The default servers of the shared
// scope have a sample from the start; the others once their client has
// been dialled.
func (r *Relay) upstreamFallback() []metrics.UpstreamFallback {
	type key struct{ auth, scope string }
	on := map[key]bool{{"", metrics.ScopeShared}: false}
	s := r.lock()
	for _, sc := range s.scopes {
		kind := scopeKind(sc.key)
		for auth, c := range sc.upstreams {
			k := key{auth, kind}
			if state, _ := c.State(); state != upstream.StateIdle || hasKey(on, k) {
				on[k] = on[k] || c.OnFallback()
			}
		}
	}
	s.unlock()
	out := make([]metrics.UpstreamFallback, 0, len(on))
	for k, v := range on {
		out = append(out, metrics.UpstreamFallback{Authority: k.auth, Scope: k.scope, OnFallback: v})
	}
	slices.SortFunc(out, func(a, b metrics.UpstreamFallback) int {
		return strings.Compare(a.Authority+"\x00"+a.Scope, b.Authority+"\x00"+b.Scope)
	})
	return out
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// scopeKind is the scope label of a scope key: "" is the shared scope,
// "group:…" a node group, "node:ID" a node's own.
func scopeKind(key string) string {
	switch {
	case key == "":
		return metrics.ScopeShared
	case strings.HasPrefix(key, "group:"):
		return metrics.ScopeGroup
	}
	return metrics.ScopeNode
}

// cachedShared counts the resources of the shared scope; the caller holds the lock.
func (s *state) cachedShared() int {
	n := 0
	for _, tc := range s.shared.types {
		n += len(tc.view.Resources)
	}
	return n
}
