package downstream

import (
	"context"
	"math"

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
// server drains (UNAVAILABLE: connect to another replica).
func (s *Server) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if s.lim != nil && !s.lim.Allow() {
		s.m.AdmissionRejections.Inc()
		return nil, status.Error(codes.ResourceExhausted, "xds-relay: too many new streams, retry with backoff")
	}
	if s.conns.draining() {
		return nil, status.Error(codes.Unavailable, "xds-relay: draining, connect to another replica")
	}
	return ctx, nil
}
