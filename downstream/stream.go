package downstream

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// StreamInfo is one stream's state for /debug/clients.
type StreamInfo struct {
	ID       uint64              `json:"id"`
	NodeID   string              `json:"node_id"`
	Cluster  string              `json:"cluster,omitempty"`
	Peer     string              `json:"peer"`
	Protocol string              `json:"protocol"` // "sotw" or "delta"
	Service  string              `json:"service"`  // "ads" or the served type URL
	Types    map[string]TypeInfo `json:"types"`
	// Status is the latest status report of the client's node, for the
	// dialects that have them (gateway.control.v1 ReportStatus); nil
	// otherwise.
	Status *StatusReport `json:"status,omitempty"`
}

// StatusReport is a client's own word on the config it runs.
type StatusReport struct {
	Version    string    `json:"version"`
	Ready      bool      `json:"ready"`
	Message    string    `json:"message,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
}

// TypeInfo is one stream's state for one type.
type TypeInfo struct {
	Wildcard     bool     `json:"wildcard,omitempty"`
	Names        []string `json:"names,omitempty"`
	SentVersion  string   `json:"sent_version,omitempty"`
	SentNonce    string   `json:"sent_nonce,omitempty"`
	AckedVersion string   `json:"acked_version,omitempty"`
	LastNACK     string   `json:"last_nack,omitempty"`
}

// stream is one downstream xDS stream. The gRPC handler goroutine reads and
// handles requests; pool workers send (one at a time per stream).
type stream struct {
	// set at creation, read-only
	srv     *Server
	id      uint64
	ss      grpc.ServerStream
	typeURL string // "" for ADS
	delta   bool
	peer    string
	proto   string // metrics label: "sotw" or "delta"
	// done is signalled by flush when a send in flight at close returns.
	done chan struct{}

	// owned by the handler goroutine
	node *corev3.Node
	// params are the TP2 dynamic parameters (canonical) derived from node
	// for the names it subscribes to without a locator.
	params string

	mu        sync.Mutex
	types     map[string]*typeState // guarded by mu
	q         queue                 // guarded by mu
	nonce     uint64                // guarded by mu
	scheduled bool                  // guarded by mu: queued in the pool or flushing
	// graceUntil: the client came back with config from elsewhere; until
	// then a type it has not asked for may hold something (mbb.go).
	graceUntil time.Time // guarded by mu
	sending    bool      // guarded by mu: a SendMsg is in flight
	closed     bool      // guarded by mu
	// inflight are the responses the client has not acknowledged yet, and
	// inflightBytes their size; gated: the stream waits for acknowledgements
	// before it sends more (see sendBudget).
	inflight      []flight         // guarded by mu
	inflightBytes int              // guarded by mu
	gated         bool             // guarded by mu
	nodeID        string           // guarded by mu
	cluster       string           // guarded by mu
	ttl           bool             // guarded by mu: the node supports TTLs (and, SotW, resources wrapped)
	principal     *authz.Principal // guarded by mu: built at the first authorization
}

// typeState is a stream's protocol state for one type. Guarded by stream.mu.
type typeState struct {
	counters typeCounters // set at creation

	// subscription
	wildcard       bool
	legacyWildcard bool // SotW: no request with names yet, so empty means wildcard
	// names are the subscribed keys; a SotW stream's set is interned in
	// set and read-only (Delta streams own theirs).
	names     map[string]struct{}
	set       *nameSet
	hasGlobs  bool // names holds an xdstp glob collection
	requested bool // a request for this type was seen

	// SotW bookkeeping
	lastNonce    string // the nonce of the latest response sent
	sentVersion  string
	ackedVersion string
	lastNACK     string
	// nackedSent: the latest response sent was NACKed, so the client
	// holds what it last ACKed (SotW).
	nackedSent bool
	// updated is when a response was last sent, ACKed or NACKed (CSDS).
	updated  time.Time
	sentOnce bool
	sentAt   time.Time // upstream receipt of the change last sent; zero when not a change

	// Delta bookkeeping: what the client holds, name → version, and whether
	// a wildcard subscription still waits for its first answer.
	has         map[string]string
	wildPending bool
	// unwild are names the client held through a wildcard it dropped: they
	// are reported removed with the next response.
	unwild []string

	// denied holds the subscribed names the stream may not have, with the
	// error its responses carry; wildcardDenied a refused wildcard.
	denied         map[string]*ResourceError
	wildcardDenied bool

	// halted are rollouts this stream skipped: Views they cover are sent
	// reverted. canary is the rollout whose verdict the response with nonce
	// canaryNonce (or a later one) reports.
	halted      []Rollout
	canary      Rollout
	canaryNonce string
	// canaryWant is the View of the latest version of its rollout queued
	// for the canary, canarySent the View of the latest sent: a verdict
	// judges the rollout only once that version went out. rejecting: the
	// client's latest verdict on the type was a NACK; canaryDoubt: it was
	// when the canary's response went out, so its NACK of that response may
	// be about anything it carries (SotW: the full state) and does not
	// judge the rollout.
	canaryWant, canarySent uint64
	rejecting, canaryDoubt bool
	// canaryCarried (Delta) holds the rollout's names that the canary's
	// responses carried since its last verdict: the verdict is about those.
	canaryCarried map[string]struct{}

	// SotW: names that stale requests dropped; if the next current request
	// names them again, they are sent again (the client dropped them).
	staleDropped map[string]struct{}
	// lastKeys (SotW): the keys of the latest response sent with resources.
	lastKeys map[string]struct{}
	// unanswered (SotW): names newly subscribed (keying.Wildcard for the
	// wildcard) that no response carried since; only these make a forced
	// item send what the client has (a change queued before the
	// subscription's own item may have answered them already).
	unanswered map[string]struct{}
	// answeredWith (SotW RDS/EDS): the version a change queued before a
	// subscription's own forced item answered a newly subscribed name with.
	// That change's View may be older than the forced item's: the name
	// changed between them while the stream did not watch it yet, so
	// nothing else brings the newer version; the forced item sends it then.
	answeredWith map[string]string

	// Transitions — never tell a client its config is gone when it isn't
	// (transitions.go). fromElsewhere (SotW): the client's first request of
	// the type carried a version, so it holds config from an earlier stream
	// (to this relay or another), and nothing was sent to it here yet.
	// heldKeys (SotW full state): the keys of the last response sent, what
	// the client holds; shared, read-only. initial (Delta): the names of
	// initial_resource_versions not answered on this stream yet. holding: why
	// a removal is held back now ("" for none), counted once per episode.
	fromElsewhere bool
	heldKeys      map[string]struct{}
	held          *body // the response heldKeys come from
	initial       map[string]struct{}
	holding       string
	// heldBack (Delta): names whose removal is held back: looked at again
	// with every later change of the type.
	heldBack map[string]struct{}

	// Make before break (mbb.go): lastView is the View of the last response
	// sent, latest the last View queued; kept holds the resources whose
	// removal is held back because the client still refers to them.
	lastView *View
	latest   *View
	kept     map[string]*Resource
	// lastItem is the View of the last queued change looked at.
	lastItem *View
	// goneHeld (SotW RDS/EDS): subscribed names sent here that a later
	// View sent from no longer has, as the client still holds them — SotW
	// cannot remove them; the client drops them when it unsubscribes.
	goneHeld map[string]*Resource

	// TP2: wrapped holds the subscribed keys that came as resource locators:
	// their variants are sent in a Resource with name and constraints.
	// heldTP2 (Delta) is the variant the client holds for each of them.
	wrapped map[string]struct{}
	heldTP2 map[string]*Resource
}

func (s *Server) serve(ss grpc.ServerStream, typeURL string, delta bool) error {
	st := &stream{
		srv:     s,
		id:      s.nextID.Add(1),
		ss:      ss,
		typeURL: typeURL,
		delta:   delta,
		proto:   "sotw",
		types:   make(map[string]*typeState),
		done:    make(chan struct{}, 1),
	}
	if delta {
		st.proto = "delta"
	}
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	s.mu.Lock()
	s.streams[st.id] = st
	s.mu.Unlock()
	defer st.close()

	if delta {
		return st.runDelta()
	}
	return st.runSotW()
}

// ID implements Watcher.
func (st *stream) ID() uint64 { return st.id }

// Notify implements Watcher: it queues the change and schedules a flush,
// urgently for the answer to a subscription.
func (st *stream) Notify(v *View, force []string) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.q.push(v, force)
	if ts := st.types[v.TypeURL]; ts != nil {
		ts.latest = v
	}
	st.scheduleLocked(force != nil)
}

// NotifyRollout implements Watcher.
func (st *stream) NotifyRollout(v *View, r Rollout, canary bool) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.q.pushRollout(v, r, canary)
	if ts := st.types[v.TypeURL]; ts != nil {
		ts.latest = v
		if canary && changesAny(v, r.Names()) {
			ts.canaryWant = v.Seq
		}
	}
	st.scheduleLocked(false)
}

// changesAny reports whether v changes one of names.
func changesAny(v *View, names []string) bool {
	for _, n := range names {
		if _, ok := v.Changed[n]; ok {
			return true
		}
	}
	return false
}

// Wake implements Watcher: a rollout the stream waits on has resolved.
func (st *stream) Wake() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.scheduleLocked(false)
}

// wrapFor returns how the stream's responses of ts's type wrap resources.
// Called with mu held.
func (st *stream) wrapFor(ts *typeState) wrap {
	return wrap{tp2: ts.wrapped, ttl: st.ttl}
}

// kick schedules a flush of what the stream queued itself.
func (st *stream) kick() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.scheduleLocked(true)
}

// scheduleLocked schedules a flush unless one is pending or the stream
// waits for acknowledgements, and unlocks mu.
func (st *stream) scheduleLocked(urgent bool) {
	sched := !st.scheduled && !st.gated
	st.scheduled = st.scheduled || sched
	st.mu.Unlock()
	if sched {
		st.srv.pool.schedule(st, urgent)
	}
}

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

// acknowledged records that the client read every response up to nonce
// (the response_nonce of a request) and resumes a stream that waited for
// it; it reports whether the stream must be scheduled. Called with mu held.
func (st *stream) acknowledged(nonce string) bool {
	n, err := strconv.ParseUint(nonce, 10, 64)
	if err != nil || len(st.inflight) == 0 {
		return false
	}
	i := 0
	for ; i < len(st.inflight) && st.inflight[i].nonce <= n; i++ {
		st.inflightBytes -= st.inflight[i].size
	}
	st.inflight = slices.Delete(st.inflight, 0, i)
	if len(st.inflight) == 0 {
		st.inflight = nil
	}
	return st.ungateLocked()
}

// unsubscribedAll forgets the unacknowledged responses of a type the client
// no longer subscribes to at all: clients ignore a response of such a type
// without acknowledging it (grpc-go, Envoy). It reports whether the stream
// must be scheduled. Called with mu held.
func (st *stream) unsubscribedAll(typeURL string) bool {
	kept := st.inflight[:0]
	for _, f := range st.inflight {
		if f.typeURL == typeURL {
			st.inflightBytes -= f.size
			continue
		}
		kept = append(kept, f)
	}
	st.inflight = kept
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

// barrier handles a rollout barrier at the head of the queue: it reports
// whether the flush must stop (the rollout is pending; the stream is woken
// when it resolves). A released barrier becomes an ordinary item; so does a
// halted one, its rollout remembered, so that it and later Views still
// carrying the halted change are sent reverted: the other changes of its
// View (a removal in the same upstream response) still go. Called with mu
// held.
func (st *stream) barrier() (stop bool) {
	for {
		h := st.q.head()
		if h == nil || h.hold == nil {
			return false
		}
		switch h.hold.State() {
		case RolloutPending:
			if h.hold.Wait(st) {
				return true
			}
		case RolloutReleased:
			h.hold = nil
		case RolloutHalted:
			if ts := st.types[h.view.TypeURL]; ts != nil {
				ts.halted = append(ts.halted, h.hold)
			}
			h.hold = nil
		}
	}
}

// flush sends queued changes until the queue is empty or waits on a
// rollout. Run by a pool worker.
func (st *stream) flush() {
	for {
		st.mu.Lock()
		if !st.closed && st.barrier() {
			st.scheduled = false
			st.mu.Unlock()
			return
		}
		if st.inflightBytes >= sendBudget && st.q.len() > 0 {
			st.gated = true // resumed by acknowledged
			st.srv.m.StreamsWaiting.Inc()
			st.scheduled = false
			st.mu.Unlock()
			return
		}
		it, ok := st.q.pop()
		if !ok || st.closed {
			st.scheduled = false
			st.mu.Unlock()
			return
		}
		ts := st.types[it.view.TypeURL]
		if ts != nil && len(it.halted) > 0 {
			ts.halted = append(ts.halted, it.halted...) // barriers the queue collapsed
		}
		if ts != nil && it.view == ts.lastItem && len(it.force) == 0 && len(it.beats) == 0 && !it.recheck {
			st.mu.Unlock()
			continue // this very change was looked at already: nothing new
		}
		if ts != nil {
			ts.lastItem = it.view
		}
		if ts != nil && len(ts.halted) > 0 {
			it.view = ts.revert(it.view)
		}
		var msg *encoded
		if st.delta {
			msg = st.buildDelta(it)
		} else {
			msg = st.buildSotW(it)
		}
		// Make before break: what the client holds of the type changed, or
		// the stream learnt what it is: what it kept back may go now.
		st.releaseKept(it.view.TypeURL)
		var sent typeCounters
		if ts := st.types[it.view.TypeURL]; ts != nil {
			sent = ts.counters
		}
		st.sending = msg != nil
		if msg != nil {
			st.inflight = append(st.inflight, flight{nonce: st.nonce, size: msg.size(), typeURL: it.view.TypeURL})
			if ts != nil {
				ts.updated = time.Now()
			}
			st.inflightBytes += msg.size()
			if ce := st.srv.log.Check(zap.DebugLevel, "response"); ce != nil {
				ce.Write(zap.Uint64("stream", st.id), zap.String("node", st.nodeID), zap.String("type", it.view.TypeURL),
					zap.Uint64("view", it.view.Seq), zap.Int("names", len(it.names)), zap.Int("forced", len(it.force)),
					zap.Int("beats", len(it.beats)), zap.Int("bytes", msg.size()))
			}
		}
		st.mu.Unlock()
		if msg == nil {
			continue
		}
		err := st.ss.SendMsg(msg)
		// Let the connection's writer, which the send just woke, run now rather
		// than queue behind the rest of a fan-out: the runnable goroutines stay
		// few, so a new client's stream or an admin request is not scheduled
		// behind thousands of them.
		runtime.Gosched()
		st.mu.Lock()
		st.sending = false
		if st.closed {
			st.done <- struct{}{} // close waits for this send (buffered: never blocks)
		}
		if err != nil {
			st.closed = true
		}
		st.mu.Unlock()
		if err != nil {
			st.srv.log.Debug("send failed", zap.Uint64("stream", st.id), zap.Error(err))
			continue
		}
		sent.responses.Inc()
		sent.bytes.Add(float64(msg.size()))
	}
}

// typeCounters are a stream type's counters, looked up once (not per
// response and ACK on the fan-out path).
type typeCounters struct{ responses, bytes, acks prometheus.Counter }

func metricsType(t string) string { return metrics.TypeLabel(t) }

// nextNonce returns a fresh nonce. Called with mu held.
func (st *stream) nextNonce() string {
	st.nonce++
	return strconv.FormatUint(st.nonce, 10)
}

// state returns the type's state, creating it. Called with mu held.
func (st *stream) state(typeURL string) *typeState {
	ts := st.types[typeURL]
	if ts == nil {
		tl := metrics.TypeLabel(typeURL)
		ts = &typeState{legacyWildcard: true, counters: typeCounters{
			responses: st.srv.m.Responses.WithLabelValues(tl, st.proto),
			bytes:     st.srv.m.ResponseBytes.WithLabelValues(tl, st.proto),
			acks:      st.srv.m.ACKs.WithLabelValues(tl, st.proto),
		}}
		st.types[typeURL] = ts
		// An ADS stream counts once per type it requested.
		st.srv.m.DownstreamStreams.WithLabelValues(tl, st.proto).Inc()
	}
	return ts
}

// bind records the stream's node from its first request and checks that
// later requests do not present another one.
func (st *stream) bind(node *corev3.Node) error {
	if node == nil {
		if st.node == nil {
			// xDS: only the first request is guaranteed to carry node; a
			// stream without one is served as an anonymous node.
			st.node = &corev3.Node{}
			return st.srv.src.Bind(st, st.node)
		}
		return nil
	}
	if st.node == nil {
		st.node = node
		if f := st.srv.opts.NodeParameters; f != nil {
			st.params = keying.CanonicalParams(f(node))
		}
		features := node.GetClientFeatures()
		st.mu.Lock()
		st.nodeID, st.cluster = node.GetId(), node.GetCluster()
		st.ttl = slices.Contains(features, featureTTL) && (st.delta || slices.Contains(features, featureSotWResource))
		st.mu.Unlock()
		return st.srv.src.Bind(st, node)
	}
	if node.GetId() != st.node.GetId() || node.GetCluster() != st.node.GetCluster() {
		return status.Errorf(codes.InvalidArgument, "node changed mid-stream: first %q, now %q", st.node.GetId(), node.GetId())
	}
	return nil
}

// revert returns v as this stream must see it after halted rollouts, and
// forgets rollouts that no longer cover what arrives.
func (ts *typeState) revert(v *View) *View {
	// Items leave in View order and every item behind a barrier is at least
	// as new as the rollout, so a rollout that no longer covers v is done.
	keep := ts.halted[:0]
	out := v
	for _, r := range ts.halted {
		if r.Covers(v) {
			out = r.Revert(out)
			keep = append(keep, r)
		}
	}
	ts.halted = keep
	return out
}

// verdict returns the rollout to report an ACK or NACK (nack) of nonce to,
// and clears it. Called with mu held.
func (ts *typeState) verdict(nonce string, nack bool) Rollout {
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
	if ts.canaryCarried == nil {
		return nil
	}
	out := make([]string, 0, len(ts.canaryCarried))
	for n := range ts.canaryCarried {
		out = append(out, n)
	}
	return out
}

// prelude checks what every request must satisfy before it touches the
// stream's state: a valid type URL, at most MaxNamesPerRequest names (n),
// and the stream's one node. It returns the request's type URL.
func (st *stream) prelude(typeURL string, n int, node *corev3.Node) (string, error) {
	typeURL, err := st.checkType(typeURL)
	if err != nil {
		return "", err
	}
	if n > st.srv.opts.MaxNamesPerRequest {
		return "", st.tooMany(n)
	}
	if err := st.bind(node); err != nil {
		st.srv.m.RejectedRequests.WithLabelValues("node").Inc()
		return "", err
	}
	return typeURL, nil
}

// nacked records a NACK of the response nonce. Called with mu held.
func (st *stream) nacked(ts *typeState, typeURL, nonce, reason string) {
	ts.lastNACK = reason
	ts.nackedSent = nonce == ts.lastNonce
	ts.updated = time.Now()
	ts.rejecting = true
	st.srv.m.NACKs.WithLabelValues(metricsType(typeURL), st.proto).Inc()
	if ce := st.srv.log.Check(zap.DebugLevel, "NACK"); ce != nil {
		ce.Write(zap.Uint64("stream", st.id), zap.String("type", typeURL), zap.String("nonce", nonce), zap.String("reason", reason))
	}
}

// acked records an ACK of the latest response, at version, and the time the
// change took from upstream receipt. Called with mu held.
func (st *stream) acked(ts *typeState, version string) {
	ts.ackedVersion = version
	ts.updated = time.Now()
	ts.rejecting = false
	ts.counters.acks.Inc()
	if !ts.sentAt.IsZero() {
		st.srv.m.Propagation.Observe(time.Since(ts.sentAt).Seconds())
		ts.sentAt = time.Time{}
	}
}

// commit finishes a request: it authorizes the subscription change and
// checks the stream's limit, unlocks mu (held on entry), reports a canary's
// verdict, and hands the change to the Source. An error ends the stream;
// its watches are dropped by close.
func (st *stream) commit(ts *typeState, typeURL string, c Change, verdict Rollout, carried []string, sent uint64, nack *statuspb.Status) error {
	if len(c.Remove) > 0 || c.Wildcard != nil {
		if !ts.wildcard && len(ts.names) == 0 && st.unsubscribedAll(typeURL) {
			defer st.kick()
		}
	}
	c = st.authorize(ts, typeURL, c)
	err := st.checkSubscriptions()
	wildcardDenied := ts.wildcardDenied
	// Make before break: what the client stopped subscribing to no longer
	// holds back the removal of what it referred to.
	released := len(c.Remove) > 0 && st.releaseKept(typeURL)
	st.mu.Unlock()
	if released {
		st.kick()
	}
	if verdict != nil {
		verdict.Report(st, nack != nil, nack.GetMessage(), carried, sent)
	}
	if err != nil {
		return err
	}
	if c.Wildcard != nil && *c.Wildcard && wildcardDenied {
		return st.reject("permission_denied", codes.PermissionDenied,
			"xds-relay: not allowed to subscribe to every %s", typeURL)
	}
	if !c.empty() {
		st.srv.src.Watch(st, typeURL, c)
	}
	return nil
}

// checkType returns the type URL a request is for, or a status error.
func (st *stream) checkType(typeURL string) (string, error) {
	switch {
	case st.typeURL == "" && typeURL == "":
		return "", st.reject("missing_type_url", codes.InvalidArgument, "type_url is required on ADS")
	case st.typeURL != "" && typeURL == "":
		return st.typeURL, nil
	case st.typeURL != "" && typeURL != st.typeURL:
		return "", st.reject("wrong_type_url", codes.InvalidArgument, "type_url %q on the %s service", typeURL, st.typeURL)
	case !keying.ValidTypeURL(typeURL):
		return "", st.reject("invalid_type_url", codes.InvalidArgument, "malformed type_url %q", typeURL)
	}
	return typeURL, nil
}

// checkSubscriptions refuses a subscription growing past the stream's limit.
// Called with mu held.
func (st *stream) checkSubscriptions() error {
	n := 0
	for _, ts := range st.types {
		n += len(ts.names)
	}
	if n > st.srv.opts.MaxSubscriptions {
		return st.reject("too_many_subscriptions", codes.ResourceExhausted,
			"%d subscribed names on one stream, the limit is %d", n, st.srv.opts.MaxSubscriptions)
	}
	return nil
}

func (st *stream) tooMany(n int) error {
	return st.reject("too_many_names", codes.ResourceExhausted,
		"%d resource names in one request, the limit is %d", n, st.srv.opts.MaxNamesPerRequest)
}

// reject counts a request refused with a status and returns it.
func (st *stream) reject(reason string, code codes.Code, format string, args ...any) error {
	st.srv.m.RejectedRequests.WithLabelValues(reason).Inc()
	st.srv.log.Debug("request rejected", zap.Uint64("stream", st.id), zap.String("reason", reason))
	return status.Errorf(code, format, args...)
}

// recvErr maps the end of the request stream to the handler's result.
func recvErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// close ends the stream: it stops queueing, drops its watches and waits
// (bounded) for a send in flight, since grpc forbids SendMsg after the
// handler returns.
func (st *stream) close() {
	st.mu.Lock()
	wasClosed := st.closed
	st.closed = true
	sending := st.sending && !wasClosed
	if st.gated {
		st.gated = false
		st.srv.m.StreamsWaiting.Dec()
	}
	st.q = queue{}
	type sub struct {
		typeURL  string
		names    []string
		wildcard bool
	}
	subs := make([]sub, 0, len(st.types))
	for t, ts := range st.types {
		subs = append(subs, sub{t, keys(ts.names), ts.wildcard})
		st.srv.sets.release(ts.set)
		ts.set = nil
		st.srv.m.DownstreamStreams.WithLabelValues(metrics.TypeLabel(t), st.proto).Dec()
	}
	st.mu.Unlock()
	off := false
	for _, s := range subs {
		var w *bool
		if s.wildcard {
			w = &off
		}
		if len(s.names) > 0 || w != nil {
			st.srv.src.Watch(st, s.typeURL, Change{Remove: s.names, Wildcard: w})
		}
	}
	st.srv.src.Cancel(st)
	st.srv.mu.Lock()
	delete(st.srv.streams, st.id)
	st.srv.mu.Unlock()
	if sending {
		// grpc forbids SendMsg after the handler returned. A send blocked on
		// a client that stopped reading ends when the client reads, resets
		// the stream or its connection closes (keepalive, Relay.Close).
		<-st.done
	}
}

func (st *stream) info() StreamInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	svc := "ads"
	if st.typeURL != "" {
		svc = st.typeURL
	}
	info := StreamInfo{ID: st.id, NodeID: st.nodeID, Cluster: st.cluster, Peer: st.peer, Protocol: st.proto,
		Service: svc, Types: make(map[string]TypeInfo, len(st.types))}
	for t, ts := range st.types {
		ti := TypeInfo{Wildcard: ts.wildcard, SentVersion: ts.sentVersion, SentNonce: ts.lastNonce,
			AckedVersion: ts.ackedVersion, LastNACK: ts.lastNACK}
		ti.Names = make([]string, 0, len(ts.names))
		for k := range ts.names {
			ti.Names = append(ti.Names, keying.DisplayKey(k))
		}
		slices.Sort(ti.Names)
		info.Types[t] = ti
	}
	return info
}

// key returns the subscription key of a name the stream subscribes to
// without a locator: canonical, with the parameters derived from its node.
func (st *stream) key(name string) string {
	if name == "" || name == keying.Wildcard {
		return name
	}
	c := canonical(name)
	if st.params == "" || isGlob(c) {
		return c
	}
	return unique.Make(keying.SubscriptionKey(c, st.params)).Value()
}

// locatorKey returns the subscription key of a TP2 resource locator.
func locatorKey(l *discoverypb.ResourceLocator) string {
	c := canonical(l.GetName())
	if c == keying.Wildcard || len(l.GetDynamicParameters()) == 0 {
		return c
	}
	return unique.Make(keying.SubscriptionKey(c, keying.CanonicalParams(l.GetDynamicParameters()))).Value()
}

// checkNames refuses names that cannot be subscription keys (the key
// separator inside a name would make it another name's parameters).
func (st *stream) checkNames(names []string, locs ...[]*discoverypb.ResourceLocator) error {
	bad := func(n string) error {
		return st.reject("malformed_name", codes.InvalidArgument, "resource name %q contains a NUL byte", n)
	}
	for _, n := range names {
		if strings.IndexByte(n, 0) >= 0 {
			return bad(n)
		}
	}
	for _, ls := range locs {
		for _, l := range ls {
			if strings.IndexByte(l.GetName(), 0) >= 0 {
				return bad(l.GetName())
			}
		}
	}
	return nil
}
