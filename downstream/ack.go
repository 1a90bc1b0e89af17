package downstream

import (
	"slices"
	"strconv"
	"time"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
)

// sendBudget bounds what a stream sends that its client has not
// acknowledged (ACK or NACK: a request naming a response's nonce says the
// client has read it and everything before it). A stream sends while what
// is unacknowledged is under it, so at most the budget plus one response is
// unread. grpc-go lets a server stream queue 64 KiB (its write quota)
// before SendMsg blocks until the client reads; under half of it, a send
// never blocks, and a client that stopped reading — a hung process, a
// half-open connection — holds no sender: its changes coalesce in its
// queue (bounded, queue.go) until it reads again or keepalive closes it.
const sendBudget = 32 << 10

// flight is a response sent and not acknowledged yet.
type flight struct {
	nonce   uint64
	size    int
	typeURL string
}

// ackInflight records that the client read every response up to nonce
// (the response_nonce of a request) and resumes a stream that waited for
// it, or for the client's answer (answered); it reports whether the stream
// must be scheduled. Called with mu held.
func (st *stream) ackInflight(nonce string) bool {
	n, err := strconv.ParseUint(nonce, 10, 64)
	if err != nil {
		return false
	}
	again := st.answered(n)
	if len(st.inflight) == 0 {
		return again
	}
	i := 0
	for ; i < len(st.inflight) && st.inflight[i].nonce <= n; i++ {
		st.inflightBytes -= st.inflight[i].size
	}
	st.inflight = slices.Delete(st.inflight, 0, i)
	if len(st.inflight) == 0 {
		st.inflight = nil
	}
	return st.ungateLocked() || again
}

// dropInflight forgets the unacknowledged responses of a type the client
// no longer subscribes to at all: clients ignore a response of such a type
// without acknowledging it (grpc-go, Envoy). It reports whether the stream
// must be scheduled. Called with mu held.
func (st *stream) dropInflight(typeURL string) bool {
	others := st.inflight[:0]
	for _, f := range st.inflight {
		if f.typeURL == typeURL {
			st.inflightBytes -= f.size
			continue
		}
		others = append(others, f)
	}
	st.inflight = others
	return st.ungateLocked()
}

// ungateLocked resumes a stream that waited for acknowledgements once they
// came; it reports whether it has something to send. Called with mu held.
func (st *stream) ungateLocked() bool {
	if st.gated && st.inflightBytes < sendBudget {
		st.gated = false
		st.srv.m.StreamsWaiting.Dec()
		return st.q.len() > 0
	}
	return false
}

// recordNACK records a NACK of the response nonce. Called with mu held.
func (st *stream) recordNACK(ts *typeState, typeURL, nonce, reason string) {
	ts.lastNACK = reason
	ts.nackedSent = nonce == ts.lastNonce
	ts.updated = time.Now()
	ts.rejecting = true
	st.srv.m.NACKs.WithLabelValues(metricsType(typeURL), st.proto).Inc()
	st.logNACK(ts, typeURL, nonce, reason)
}

// recordACK records an ACK of the latest response, at version, and the time the
// change took from upstream receipt. Called with mu held.
func (st *stream) recordACK(ts *typeState, version string) {
	ts.ackedVersion = version
	ts.updated = time.Now()
	ts.rejecting = false
	ts.counters.acks.Inc()
	if !ts.sentAt.IsZero() {
		st.srv.m.Propagation.Observe(time.Since(ts.sentAt).Seconds())
		ts.sentAt = time.Time{}
	}
}

// takeVerdict returns the rollout to report an ACK or NACK (nack) of nonce to,
// and clears it. Called with mu held.
func (ts *typeState) takeVerdict(nonce string, nack bool) Rollout {
	if ts.rolloutState == nil {
		return nil
	}
	r := ts.canary
	if r == nil || nonce == "" || ts.canarySent < ts.canaryWant {
		return nil // (a newer version of the rollout is on its way)
	}
	if nack && ts.canaryDoubt {
		ts.canary, ts.canaryNonce, ts.canaryCarried = nil, "", nil
		return nil // it was rejecting the type already
	}
	if n, err1 := strconv.ParseUint(nonce, 10, 64); err1 == nil {
		if c, err2 := strconv.ParseUint(ts.canaryNonce, 10, 64); err2 == nil && n < c {
			return nil // an answer to an earlier response
		}
	}
	ts.canary, ts.canaryNonce, ts.canaryCarried = nil, "", nil
	return r
}

// carried returns the rollout's names the canary's responses carried since
// its last verdict (Delta), nil for all of them (SotW). Called with mu held,
// before verdict clears them.
func (ts *typeState) carried() []string {
	if ts.rolloutState == nil || ts.canaryCarried == nil {
		return nil
	}
	out := make([]string, 0, len(ts.canaryCarried))
	for n := range ts.canaryCarried {
		out = append(out, n)
	}
	return out
}

// canaryVerdict is a canary's ACK or NACK that a request carries, reported
// to its rollout once mu is released.
type canaryVerdict struct {
	rollout Rollout // nil: nothing to report
	carried []string
	sent    uint64
	nack    *statuspb.Status
}

// report reports the verdict to its rollout. Called without mu.
func (v canaryVerdict) report(st *stream) {
	if v.rollout != nil {
		v.rollout.Report(st, v.nack != nil, v.nack.GetMessage(), v.carried, v.sent)
	}
}
