package downstream

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runDelta serves an incremental stream.
func (st *stream) runDelta() error {
	return status.Error(codes.Unimplemented, "xds-relay: Delta xDS is not served yet")
}

// buildDelta turns a queued change into a Delta response. Called with mu held.
func (st *stream) buildDelta(it item) *encoded { return nil }
