package relay

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The reversible drain of the admin API (POST and DELETE /drain) and the
// gRPC health status, which follows readiness. The drain on SIGTERM is
// StopServing's (lifecycle.go): it ends in the process's exit and is never
// undone.

// maintenance is the state of the reversible drain.
type maintenance struct {
	// on is true while the drain lasts: read without mu, written under it.
	on atomic.Bool

	mu     sync.Mutex
	cancel context.CancelFunc // guarded by mu: stops the closing of connections; nil when off
	done   chan struct{}      // guarded by mu: closed when the closing goroutine returned; nil when off
}

// wait returns when the goroutine of the current drain, if any, returned.
func (m *maintenance) wait() {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// StartDrain takes the relay out of service until EndDrain (POST /drain):
// readiness and the gRPC health status turn false, new xDS streams are
// refused with UNAVAILABLE (health checks and reflection are answered), new
// REST polls are answered 503, and the client connections open now are
// closed oldest first over shutdown.drain_window, so that their streams end
// with UNAVAILABLE and the clients reconnect to the other replicas. The
// listeners stay open and the upstreams connected. It reports whether it
// started a drain: false while one lasts or the relay is shutting down.
func (r *Relay) StartDrain() bool {
	m := &r.maint
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.on.Load() || r.draining.Load() {
		return false
	}
	m.on.Store(true)
	r.ds.SetRefusing(true)
	r.dx.setRefusing(true)
	r.updateHealth()
	window := r.cfg.Shutdown.DrainWindow
	r.log.Info("draining until the drain is ended", zap.Duration("drain_window", window),
		zap.Int("streams", r.ds.OpenStreams()))
	ctx, cancel := context.WithCancel(r.life) // Close cuts it short
	done := make(chan struct{})
	m.cancel, m.done = cancel, done
	go func() {
		defer close(done)
		_ = r.ds.CloseConns(ctx, window)
	}()
	return true
}

// EndDrain ends the drain StartDrain began (DELETE /drain): no more
// connections are closed, new streams and polls are accepted again, and
// readiness answers as it would without the drain. It reports whether a
// drain was on. It never ends the drain of a shutdown.
func (r *Relay) EndDrain() bool {
	m := &r.maint
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on.Load() {
		return false
	}
	m.cancel()
	<-m.done
	m.cancel, m.done = nil, nil
	r.ds.SetRefusing(false)
	r.dx.setRefusing(false)
	m.on.Store(false)
	r.updateHealth()
	r.log.Info("drain ended: serving again")
	return true
}

// updateHealth sets the gRPC health status of the service "" from
// Readiness: SERVING while ready, NOT_SERVING otherwise. It is called at
// every change of readiness; once StopServing has begun, the health server
// is shut down and answers NOT_SERVING whatever it is told.
func (r *Relay) updateHealth() {
	r.healthMu.Lock()
	defer r.healthMu.Unlock()
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if r.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	r.health.SetServingStatus("", st)
}
