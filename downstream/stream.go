package downstream

import (
	"slices"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
	// Holds is what the client holds of the type, by name (display form),
	// as ClientTypeState.Holds; set only when the streams of one node are
	// asked for (Streams with a node id).
	Holds map[string]HeldResource `json:"-"`
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
	node *corev3.Node // shared with the streams presenting the same node: read-only
	// nodeKey is node's key in the server's nodes (0: not shared).
	nodeKey uint64
	// params are the TP2 dynamic parameters (canonical) derived from node
	// for the names it subscribes to without a locator.
	params string

	mu    sync.Mutex
	types map[string]*typeState // guarded by mu
	q     queue                 // guarded by mu
	nonce uint64                // guarded by mu
	// The flags, guarded by mu, kept together (padding counts per stream).
	scheduled   bool // queued in the pool or flushing
	sending     bool // a SendMsg is in flight
	closed      bool
	gated       bool // see inflight
	ttl         bool // the node supports TTLs (and, SotW, resources wrapped)
	limitLogged bool // a request over a limit was logged (overLimit)
	reading     bool // the handler takes in a request: the reconnect's grace stands still
	// graceUntil: the client came back with config from elsewhere; until
	// then a type it has not asked for may hold something (mbb.go).
	// graceLeft: what was left of the grace when the handler began reading
	// a request; graceUntil moves on by the time the read took.
	// answerBy: until then, unless the client answers a response first, a
	// type it has not asked for may hold something too (zero: none).
	graceUntil time.Time     // guarded by mu
	graceLeft  time.Duration // guarded by mu
	answerBy   time.Time     // guarded by mu
	// inflight are the responses the client has not acknowledged yet, and
	// inflightBytes their size; gated: the stream waits for acknowledgements
	// before it sends more (see sendBudget).
	inflight      []flight         // guarded by mu
	inflightBytes int              // guarded by mu
	nodeID        string           // guarded by mu
	cluster       string           // guarded by mu
	principal     *authz.Principal // guarded by mu: built at the first authorization
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
	clients := s.m.DownstreamClients.WithLabelValues(st.proto)
	clients.Inc()
	defer clients.Dec()
	defer st.close()

	var err error
	if delta {
		err = st.runDelta()
	} else {
		err = st.runSotW()
	}
	st.logDisconnected(err)
	return err
}

// ID implements Watcher.
func (st *stream) ID() uint64 { return st.id }

// wrapFor returns how the stream's responses of ts's type wrap resources.
// Called with mu held.
func (st *stream) wrapFor(ts *typeState) wrap {
	return wrap{tp2: ts.wrapped, ttl: st.ttl}
}

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
		ts = &typeState{subscription: subscription{legacyWildcard: true}, counters: st.srv.typeCounters(tl, st.proto)}
		st.types[typeURL] = ts
		// An ADS stream counts once per type it requested.
		st.srv.m.DownstreamStreams.WithLabelValues(tl, st.proto).Inc()
	}
	return ts
}

// typeCounters returns the counters of a type label and protocol, shared by
// every stream.
func (s *Server) typeCounters(tl, proto string) *typeCounters {
	key := [2]string{tl, proto}
	if c, ok := s.counters.Load(key); ok {
		return c.(*typeCounters)
	}
	c, _ := s.counters.LoadOrStore(key, &typeCounters{
		responses: s.m.Responses.WithLabelValues(tl, proto),
		bytes:     s.m.ResponseBytes.WithLabelValues(tl, proto),
		acks:      s.m.ACKs.WithLabelValues(tl, proto),
	})
	return c.(*typeCounters)
}

// bind records the stream's node from its first request and checks that
// later requests do not present another one.
func (st *stream) bind(node *corev3.Node) error {
	if node == nil {
		if st.node == nil {
			// xDS: only the first request is guaranteed to carry node; a
			// stream without one is served as an anonymous node.
			st.node = &corev3.Node{}
			st.logConnected("")
			return st.srv.src.Bind(st, st.node)
		}
		return nil
	}
	if st.node == nil {
		node, st.nodeKey = st.srv.nodes.intern(node)
		st.node = node
		if f := st.srv.opts.NodeParameters; f != nil {
			st.params = keying.CanonicalParams(f(node))
		}
		features := node.GetClientFeatures()
		st.mu.Lock()
		st.nodeID, st.cluster = node.GetId(), node.GetCluster()
		st.ttl = slices.Contains(features, featureTTL) && (st.delta || slices.Contains(features, featureSotWResource))
		st.mu.Unlock()
		st.logConnected(node.GetId())
		return st.srv.src.Bind(st, node)
	}
	if node.GetId() != st.node.GetId() || node.GetCluster() != st.node.GetCluster() {
		return status.Errorf(codes.InvalidArgument, "node changed mid-stream: first %q, now %q", st.node.GetId(), node.GetId())
	}
	return nil
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
	st.srv.nodes.release(st.nodeKey)
	st.nodeKey = 0
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

// info returns the stream's state; with holds, what the client holds of
// each type too.
func (st *stream) info(holds bool) StreamInfo {
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
		if holds {
			ti.Holds = displayed(ts.clientHolds(t))
		}
		info.Types[t] = ti
	}
	return info
}
