package gateway

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// Protocol labels of the gateway's streams.
const (
	protoSotW  = "gateway-sotw"
	protoDelta = "gateway-delta"
)

// sotwGroup is the data planes of one group key on StreamConfiguration:
// one upstream stream, the latest snapshot, and every stream it is sent to.
type sotwGroup struct {
	group[*sotwStream]
	// set at creation, read-only: the upstream request (identity and
	// subscriptions)
	req *controlv1.DiscoveryRequest

	// guarded by group.mu
	version  string // the snapshot's version ("" before any)
	snapshot []byte // the upstream's ConfigSnapshot bytes
	body     []byte // the response without its nonce, shared by every stream
	received time.Time
	secrets  bool // the snapshot carries SecretMaterial (not written to disk)
	// confirmed: the snapshot is the upstream's word on its current stream
	// (set with the first accepted answer, cleared when the stream ends).
	confirmed bool
}

// joinSotW adds st to the group of k, creating the group (seeded from the
// warm-restart cache) and its upstream stream.
func (s *Server) joinSotW(k groupKey, st *sotwStream) (*sotwGroup, error) {
	name := k.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "xds-relay: shutting down")
	}
	g := s.sotw[name]
	if g == nil {
		g = &sotwGroup{}
		g.init(s, k, protoSotW)
		nodeID, cluster := s.upstreamIdentity(k)
		g.req = &controlv1.DiscoveryRequest{NodeId: nodeID, Cluster: cluster, Subscriptions: k.subs, SupportedFeatures: k.features}
		if w, ok := s.warm.sotw[name]; ok {
			g.setSnapshot(w.version, w.snapshot, time.Time{})
			delete(s.warm.sotw, name)
		}
		s.sotw[name] = g
		g.start(g.session)
	}
	g.add(st)
	return g, nil
}

// leaveSotW removes st from g.
func (s *Server) leaveSotW(g *sotwGroup, st *sotwStream) {
	g.leave(st, func() bool {
		if s.sotw[g.name] != g {
			return false
		}
		delete(s.sotw, g.name)
		return true
	})
}

// setSnapshot makes a snapshot current. Called with mu held (or before the
// group is shared).
func (g *sotwGroup) setSnapshot(version string, snapshot []byte, received time.Time) {
	g.version, g.snapshot, g.received = version, snapshot, received
	g.body = encodeSnapshotBody(version, snapshot)
	g.secrets = hasField(snapshot, snapshotSecrets)
}

// snapshotSecrets is ConfigSnapshot.secrets (SecretMaterial).
const snapshotSecrets = 8

// hasField reports whether message b has field num.
func hasField(b []byte, num protowire.Number) bool {
	found := false
	_ = eachField(b, func(n protowire.Number, _ protowire.Type, _ []byte) error {
		found = found || n == num
		return nil
	})
	return found
}

// session runs one upstream StreamConfiguration: it subscribes, and ACKs
// every snapshot it accepts (NACKs a malformed one, which never reaches a
// data plane).
func (g *sotwGroup) session(ctx context.Context, cc *grpc.ClientConn, server string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(ctx, &controlv1.ConfigurationDiscoveryService_ServiceDesc.Streams[0],
		controlv1.ConfigurationDiscoveryService_StreamConfiguration_FullMethodName)
	if err != nil {
		return false, err
	}
	answer := func(nonce string) *controlv1.DiscoveryRequest {
		return &controlv1.DiscoveryRequest{NodeId: g.req.NodeId, Cluster: g.req.Cluster, Subscriptions: g.req.Subscriptions,
			SupportedFeatures: g.req.SupportedFeatures, Nonce: nonce}
	}
	// The first request carries no version, even with a snapshot cached: a
	// control plane answers a version it holds with silence, and silence
	// never confirms the cache — data planes that came with another version
	// would wait for its next change. Its answer, even of the cached
	// version, is the upstream's word.
	if err := cs.SendMsg(answer("")); err != nil {
		return false, err
	}
	defer g.unconfirm()
	answered := false
	for {
		b, err := g.recv(cs, server, &answered)
		if err != nil {
			return answered, err
		}
		r, perr := parseResponse(b)
		ack := answer(r.nonce)
		if perr != nil {
			ack.ResultStatus, ack.ErrorDetail = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK, "xds-relay: "+perr.Error()
			g.mu.Lock()
			ack.Version = g.version
			g.mu.Unlock()
			g.s.m.GatewayUpstreamResponses.WithLabelValues(protoSotW, "nack").Inc()
			g.log.Warn("gateway snapshot rejected", zap.String("server", server), zap.Error(perr))
		} else {
			ack.ResultStatus, ack.Version = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_ACK, r.version
			g.s.m.GatewayUpstreamResponses.WithLabelValues(protoSotW, "ack").Inc()
			g.update(r)
		}
		if err := cs.SendMsg(ack); err != nil {
			return answered, err
		}
	}
}

// update makes an accepted snapshot current and confirmed, and wakes every
// stream when either changed: the snapshot and its confirmation are set
// together, so that no stream sends the cached snapshot as confirmed while
// the upstream's answer replaces it.
func (g *sotwGroup) update(r snapshotResponse) {
	g.mu.Lock()
	confirming := !g.confirmed
	g.confirmed = true
	same := r.version == g.version && bytes.Equal(r.snapshot, g.snapshot)
	if !same {
		g.setSnapshot(r.version, bytes.Clone(r.snapshot), time.Now())
	}
	g.mu.Unlock()
	if same && !confirming {
		return
	}
	for _, st := range g.each() {
		st.signal()
	}
	if !same && g.s.persist != nil {
		g.s.persist.touch()
	}
}

// unconfirm marks the snapshot no longer the upstream's word (its stream
// ended).
func (g *sotwGroup) unconfirm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.confirmed = false
}

// sotwStream is one data plane's StreamConfiguration.
type sotwStream struct {
	// set at creation, read-only
	s    *Server
	id   uint64
	ss   grpc.ServerStream
	peer string
	wake chan struct{} // one slot: the group's snapshot changed

	// owned by the handler goroutine (identity written under mu)
	identity
	features  []string
	subs      []string
	g         *sotwGroup
	principal *authz.Principal
	secretsOK bool // authorized for SecretMaterialType
	nonce     uint64

	mu            sync.Mutex // guards the fields below (read by info)
	lastNonce     string
	sentVersion   string
	ackedVersion  string
	nackedVersion string
	lastNACK      string
}

func (st *sotwStream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// serveSotW serves one StreamConfiguration until it ends.
func (s *Server) serveSotW(ss grpc.ServerStream) error {
	st := &sotwStream{s: s, id: s.opts.NewID(), ss: ss, peer: peerOf(ss), wake: make(chan struct{}, 1)}
	return serveStream(s, ss, st.id, st, protoSotW, st.wake, st.handle, st.push, func() {
		if st.g != nil {
			s.leaveSotW(st.g, st)
		}
	})
}

// isNACK reads a request's verdict: result_status NACK, or (from a client
// that leaves it unset) an error_detail.
func isNACK(rs controlv1.DiscoveryResultStatus, detail string) bool {
	return rs == controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK ||
		(rs == controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_UNSPECIFIED && detail != "")
}

// handle applies one request: the first joins the group (the data plane's
// version, when it has one, is taken as held); later ones ACK or NACK the
// latest response (a stale nonce is ignored) and may change the
// subscriptions, which moves the stream to another group. push follows.
func (st *sotwStream) handle(req *controlv1.DiscoveryRequest) error {
	s := st.s
	if err := s.admit(&st.mu, &st.identity, req.GetNodeId(), req.GetCluster(), req.GetSubscriptions()); err != nil {
		return err
	}
	st.mu.Lock()
	if st.lastNonce != "" {
		if req.GetNonce() != st.lastNonce {
			// A stale nonce answers an earlier response: not a verdict on
			// the latest (and its subscriptions come again with that one).
			st.mu.Unlock()
			s.m.StaleNonces.WithLabelValues(protoSotW).Inc()
			return nil
		}
		if isNACK(req.GetResultStatus(), req.GetErrorDetail()) {
			// Never resent: only a new snapshot version goes to it.
			st.nackedVersion, st.lastNACK = st.sentVersion, req.GetErrorDetail()
			s.m.NACKs.WithLabelValues(controlType, protoSotW).Inc()
			s.log.Debug("gateway NACK", zap.String("node", st.nodeID), zap.String("version", st.sentVersion),
				zap.String("reason", st.lastNACK))
		} else {
			st.ackedVersion = st.sentVersion
			s.m.ACKs.WithLabelValues(controlType, protoSotW).Inc()
		}
	} else if st.g == nil && req.GetVersion() != "" {
		st.ackedVersion = req.GetVersion() // what the data plane runs already
	}
	st.mu.Unlock()

	subs := sortedSet(req.GetSubscriptions())
	if st.g == nil || (len(subs) > 0 && !slices.Equal(subs, st.subs)) {
		if st.g == nil {
			st.features = req.GetSupportedFeatures()
			st.principal = &authz.Principal{NodeID: st.nodeID, Cluster: st.cluster}
			st.principal.SPIFFEID, st.principal.URISANs, st.principal.MTLS = tlsconfig.PeerIdentity(st.ss.Context())
		}
		// No subscriptions means every type: the secrets too.
		check := subs
		if len(check) == 0 {
			check = []string{SecretMaterialType}
		}
		if err := s.authorize(st.principal, check...); err != nil {
			return err
		}
		st.secretsOK = slices.Contains(check, SecretMaterialType)
		g, err := s.joinSotW(s.keyOf(st.nodeID, st.cluster, st.features, subs), st)
		if err != nil {
			return err
		}
		if st.g != nil && st.g != g {
			s.leaveSotW(st.g, st)
		}
		st.g, st.subs = g, subs
	}
	return nil
}

// controlType is the type_url metrics label of gateway traffic.
const controlType = "other"

// push sends the group's snapshot unless the data plane has it, was sent
// it, or rejected it, or came with another version while the snapshot is
// not confirmed by the upstream.
func (st *sotwStream) push() error {
	g := st.g
	if g == nil {
		return nil
	}
	g.mu.Lock()
	version, body, secrets, confirmed := g.version, g.body, g.secrets, g.confirmed
	g.mu.Unlock()
	if secrets && !st.secretsOK && version != "" {
		// The control plane sent secrets this data plane did not subscribe
		// to (and was not authorized for): never forward them.
		st.s.m.RejectedRequests.WithLabelValues("permission_denied").Inc()
		return status.Errorf(codes.PermissionDenied, "xds-relay: the snapshot carries %s, which this data plane is not authorized for", SecretMaterialType)
	}
	st.mu.Lock()
	if version == "" || version == st.sentVersion || version == st.nackedVersion ||
		(st.sentVersion == "" && version == st.ackedVersion) {
		st.mu.Unlock()
		return nil
	}
	if st.sentVersion == "" && st.ackedVersion != "" && !confirmed {
		// No rollback: a data plane that came running another version (from
		// another replica, or from before a restart) is not sent the group's
		// snapshot while no live upstream stream confirms it — it may be
		// older than what the data plane runs.
		st.mu.Unlock()
		return nil
	}
	st.nonce++
	nonce := strconv.FormatUint(st.nonce, 10)
	st.lastNonce, st.sentVersion = nonce, version
	st.mu.Unlock()
	if err := st.ss.SendMsg(downstream.PreEncoded(body, respNonce, nonce)); err != nil {
		return err
	}
	st.s.m.Responses.WithLabelValues(controlType, protoSotW).Inc()
	st.s.m.ResponseBytes.WithLabelValues(controlType, protoSotW).Add(float64(len(body) + len(nonce) + 2))
	return nil
}

// info is the stream's entry in /debug/clients.
func (st *sotwStream) info() downstream.StreamInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	ti := downstream.TypeInfo{SentVersion: st.sentVersion, SentNonce: st.lastNonce, AckedVersion: st.ackedVersion, LastNACK: st.lastNACK}
	return downstream.StreamInfo{ID: st.id, NodeID: st.nodeID, Cluster: st.cluster, Peer: st.peer, Protocol: protoSotW,
		Service: controlv1.ConfigurationDiscoveryService_ServiceDesc.ServiceName,
		Types:   map[string]downstream.TypeInfo{controlv1.ConfigSnapshotType: ti}}
}
