package gateway

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// deltaStream is one data plane's DeltaStreamConfiguration.
type deltaStream struct {
	// set at creation, read-only
	s    *Server
	id   uint64
	ss   grpc.ServerStream
	peer string
	wake chan struct{} // one slot: something is pending

	// owned by the handler goroutine (identity written under mu)
	identity
	g         *deltaGroup
	principal *authz.Principal
	initial   map[string]map[string]string // initial_resource_versions of the first request
	nonce     uint64

	mu sync.Mutex
	// pending are the changes to send, in the order the upstream made them;
	// a change merges into the last one only when it is of the same type.
	pending []pendingChange
	// types is the state of each subscribed type; a type's has is written by
	// the handler goroutine under mu.
	types map[string]*deltaTypeState
}

// pendingChange is a change of one type a stream has to look at: the names
// that changed, or every name (full: a new subscription, or the upstream's
// first answer for the type).
type pendingChange struct {
	typeURL string
	names   map[string]struct{}
	full    bool
}

// maxPending bounds a stream's pending changes; past it they collapse to one
// full change per type (a stalled data plane costs bounded memory).
const maxPending = 64

// deltaTypeState is a stream's state of one type.
type deltaTypeState struct {
	has       map[string]string // name → version the data plane holds (as sent)
	answered  bool
	lastNonce string
	sent      string // system_version_info of the latest response
	acked     string // the latest system_version_info ACKed
	lastNACK  string
}

func (st *deltaStream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// offer queues a change of typeURL for the stream if it subscribes to it.
// It never blocks.
func (st *deltaStream) offer(typeURL string, names []string, full bool) {
	st.mu.Lock()
	defer st.signal()
	defer st.mu.Unlock()
	if st.types[typeURL] == nil {
		return
	}
	st.queueLocked(typeURL, names, full)
}

func (st *deltaStream) queueLocked(typeURL string, names []string, full bool) {
	if n := len(st.pending); n > 0 && st.pending[n-1].typeURL == typeURL {
		p := &st.pending[n-1]
		p.full = p.full || full
		for _, name := range names {
			p.names[name] = struct{}{}
		}
		return
	}
	p := pendingChange{typeURL: typeURL, names: make(map[string]struct{}, len(names)), full: full}
	for _, name := range names {
		p.names[name] = struct{}{}
	}
	st.pending = append(st.pending, p)
	if len(st.pending) > maxPending {
		// One full change per type, in the order of their last change.
		last := make(map[string]int)
		for i, c := range st.pending {
			last[c.typeURL] = i
		}
		var out []pendingChange
		for i, c := range st.pending {
			if last[c.typeURL] == i {
				out = append(out, pendingChange{typeURL: c.typeURL, names: map[string]struct{}{}, full: true})
			}
		}
		st.pending = out
	}
}

// serveDelta serves one DeltaStreamConfiguration until it ends.
func (s *Server) serveDelta(ss grpc.ServerStream) error {
	st := &deltaStream{s: s, id: s.opts.NewID(), ss: ss, peer: peerOf(ss), wake: make(chan struct{}, 1),
		types: make(map[string]*deltaTypeState)}
	return serveStream(s, ss, st.id, st, protoDelta, st.wake, st.handle, st.flush, func() {
		if st.g != nil {
			st.mu.Lock()
			types := slices.Collect(maps.Keys(st.types))
			st.mu.Unlock()
			s.leaveDelta(st.g, st, types)
		}
	})
}

// handle applies one request. Subscription changes are honoured whatever
// the nonce; ACK/NACK is per response nonce and type.
func (st *deltaStream) handle(req *controlv1.DeltaDiscoveryRequest) error {
	s := st.s
	types := append(slices.Clone(req.GetResourceNamesSubscribe()), req.GetResourceNamesUnsubscribe()...)
	if err := s.admit(&st.mu, &st.identity, req.GetNodeId(), req.GetCluster(), types); err != nil {
		return err
	}
	if st.g == nil {
		initial, err := parseInitialVersions(req.GetInitialResourceVersions())
		if err != nil {
			s.m.RejectedRequests.WithLabelValues("initial_resource_versions").Inc()
			return status.Errorf(codes.InvalidArgument, "xds-relay: %v", err)
		}
		st.initial = initial
		st.principal = &authz.Principal{NodeID: st.nodeID, Cluster: st.cluster}
		st.principal.SPIFFEID, st.principal.URISANs, st.principal.MTLS = tlsconfig.PeerIdentity(st.ss.Context())
		if st.g, err = s.joinDelta(s.keyOf(st.nodeID, st.cluster, req.GetSupportedFeatures(), nil), st); err != nil {
			return err
		}
	}
	if nonce := req.GetResponseNonce(); nonce != "" {
		st.verdict(req)
	}
	for _, t := range req.GetResourceNamesSubscribe() {
		st.mu.Lock()
		_, had := st.types[t]
		st.mu.Unlock()
		if had {
			continue
		}
		if err := s.authorize(st.principal, t); err != nil {
			return err
		}
		ts := &deltaTypeState{has: make(map[string]string)}
		for n, v := range st.initial[t] {
			ts.has[n] = v // what the data plane holds: not sent again
		}
		st.mu.Lock()
		st.types[t] = ts
		st.queueLocked(t, nil, true)
		st.mu.Unlock()
		st.g.subscribe(t)
	}
	for _, t := range req.GetResourceNamesUnsubscribe() {
		st.mu.Lock()
		_, had := st.types[t]
		delete(st.types, t)
		st.mu.Unlock()
		if had {
			st.g.unsubscribe(t)
		}
	}
	st.initial = nil
	return nil
}

// verdict records the ACK or NACK of the response with the request's nonce
// (for its type); a nonce that is not the type's latest is stale.
func (st *deltaStream) verdict(req *controlv1.DeltaDiscoveryRequest) {
	s := st.s
	st.mu.Lock()
	defer st.mu.Unlock()
	ts := st.types[req.GetTypeUrl()]
	if ts == nil || req.GetResponseNonce() != ts.lastNonce {
		s.m.StaleNonces.WithLabelValues(protoDelta).Inc()
		return
	}
	if isNACK(req.GetResultStatus(), req.GetErrorDetail()) {
		// The versions sent stay recorded as held: not resent; the next
		// change of a resource is.
		ts.lastNACK = req.GetErrorDetail()
		s.m.NACKs.WithLabelValues(controlType, protoDelta).Inc()
		s.log.Debug("gateway Delta NACK", zap.String("node", st.nodeID), zap.String("type", req.GetTypeUrl()),
			zap.String("reason", ts.lastNACK))
		return
	}
	ts.acked = ts.sent
	s.m.ACKs.WithLabelValues(controlType, protoDelta).Inc()
}

// flush sends what is pending, one response per change.
func (st *deltaStream) flush() error {
	for {
		st.mu.Lock()
		if len(st.pending) == 0 {
			st.mu.Unlock()
			return nil
		}
		c := st.pending[0]
		st.pending = st.pending[1:]
		ts := st.types[c.typeURL]
		st.mu.Unlock()
		if ts == nil {
			continue // unsubscribed meanwhile
		}
		sel, ok := st.g.selectFor(c.typeURL, ts.has, slices.Collect(maps.Keys(c.names)), c.full, ts.answered)
		if !ok {
			continue
		}
		st.nonce++
		nonce := strconv.FormatUint(st.nonce, 10)
		st.mu.Lock()
		for _, r := range sel.send {
			ts.has[r.name] = r.version
		}
		for _, n := range sel.removed {
			delete(ts.has, n)
		}
		ts.answered, ts.lastNonce, ts.sent = true, nonce, sel.version
		st.mu.Unlock()
		if err := st.ss.SendMsg(downstream.PreEncoded(sel.body, deltaNonce, nonce)); err != nil {
			return err
		}
		st.s.m.Responses.WithLabelValues(controlType, protoDelta).Inc()
		st.s.m.ResponseBytes.WithLabelValues(controlType, protoDelta).Add(float64(len(sel.body) + len(nonce) + 2))
	}
}

// info is the stream's entry in /debug/clients: per type, the number of
// resources held is len(names).
func (st *deltaStream) info() downstream.StreamInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	info := downstream.StreamInfo{ID: st.id, NodeID: st.nodeID, Cluster: st.cluster, Peer: st.peer, Protocol: protoDelta,
		Service: controlv1.DeltaDiscoveryService_ServiceDesc.ServiceName, Types: make(map[string]downstream.TypeInfo, len(st.types))}
	for t, ts := range st.types {
		info.Types[t] = downstream.TypeInfo{Wildcard: true, Names: slices.Sorted(maps.Keys(ts.has)), SentVersion: ts.sent,
			SentNonce: ts.lastNonce, AckedVersion: ts.acked, LastNACK: ts.lastNACK}
	}
	return info
}
