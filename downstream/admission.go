package downstream

import (
	"context"
	"math"
	"strings"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// newLimiter is the admission control of new streams: a token bucket of
// golang.org/x/time/rate refilling perSecond tokens a second, as many at
// most (at least one); nil (everything admitted) when perSecond is 0.
func newLimiter(perSecond float64) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(math.Ceil(perSecond))))
}

// tap runs before grpc creates a stream (grpc.InTapHandle, on the
// connection's reader goroutine: it must not block). It refuses the stream
// early, before any of its state exists, when the admission rate is
// exceeded (RESOURCE_EXHAUSTED: a reconnect storm is spread out by the
// clients' own backoff instead of becoming a burst of work) or while the
// server drains or refuses (UNAVAILABLE: connect to another replica).
// Health checks and reflection are never refused: they read no relay state,
// and a draining relay is to say so (NOT_SERVING), not fail the probe.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if isProbe(info.FullMethodName) {
		return ctx, nil
	}
	if s.lim != nil && !s.lim.Allow() {
		s.m.AdmissionRejections.Inc()
		return nil, status.Error(codes.ResourceExhausted, "xds-relay: too many new streams, retry with backoff")
	}
	if s.refusing.Load() || s.conns.draining() {
		return nil, status.Error(codes.Unavailable, "xds-relay: draining, connect to another replica")
	}
	return ctx, nil
}

// isProbe reports whether method (/package.Service/Method) is of the gRPC
// health service or of server reflection.
func isProbe(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
}

// SetRefusing turns the refusal of new streams on or off: while on, every
// new stream but health checks and reflection is refused with UNAVAILABLE,
// as during Drain, and the open ones go on. Drain's refusal is for good;
// this one is not (the relay's reversible drain, POST and DELETE /drain).
func (s *Server) SetRefusing(on bool) { s.refusing.Store(on) }
