package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// Upstream is one upstream control plane server speaking gateway.control.v1.
type Upstream struct {
	URI string
	// Creds are its transport credentials; nil for plaintext. CallCreds are
	// sent with every call (upstream call_creds).
	Creds     credentials.TransportCredentials
	CallCreds []credentials.PerRPCCredentials
}

// Defaults of Options.
const (
	DefaultLinger        = 5 * time.Second
	DefaultReportRetries = 3
	maxSubscriptions     = 64 // type URLs on one stream
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// Upstreams are tried in order (fallback). Required.
	Upstreams []Upstream
	// NodeID and Cluster are the relay's own identity, presented upstream
	// where the group key does not say otherwise.
	NodeID, Cluster string
	// GroupBy are the request fields keying snapshot groups: node_id,
	// cluster, supported_features. nil: [cluster]; empty: one group (per
	// set of subscribed types) presenting NodeID and Cluster upstream.
	GroupBy []string
	// ReportRetries bounds the attempts to forward one report. Default 3.
	ReportRetries int
	// Linger is how long a group keeps its upstream stream after its last
	// data plane left. Default 5s.
	Linger time.Duration
	// Authorize, when set, is asked for every subscribed type URL (name
	// "*"), for SecretMaterialType by every SotW stream (snapshots carry
	// secrets) and for StatusReportType (name: the node id) by ReportStatus.
	Authorize authz.Authorizer
	// PersistPath, when set, is the warm-restart file of the gateway cache.
	PersistPath string
	// PersistInterval is the least time between two writes of PersistPath,
	// and the most a change waits to be written. Default 1s.
	PersistInterval time.Duration
	// NewID returns a stream id unique among the relay's streams (so that
	// /debug/clients lists each once). Default: the server's own counter.
	NewID func() uint64
	// Metrics must be set.
	Metrics *metrics.Metrics
	Logger  *zap.Logger
}

// Server relays gateway.control.v1: it serves the data planes and keeps
// one upstream stream per group. Create it with New, add it to a
// grpc.Server built with downstream.ServerOptions() by Register, and Close
// it after the grpc.Server stopped.
type Server struct {
	// set at creation, read-only
	opts    Options
	log     *zap.Logger
	m       *metrics.Metrics
	reports *reporter
	persist *persister // nil without PersistPath
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the groups' upstream runners and the forwarder

	mu      sync.Mutex
	sotw    map[string]*sotwGroup    // guarded by mu: by group key
	delta   map[string]*deltaGroup   // guarded by mu: by group key
	warm    *warmCache               // guarded by mu: loaded from PersistPath, not yet used
	streams map[uint64]debugStream   // guarded by mu: open data plane streams
	conns   map[int]*grpc.ClientConn // guarded by mu: by upstream index, dialled lazily
	closed  bool                     // guarded by mu
}

// debugStream is an open data plane stream, for /debug/clients.
type debugStream interface{ info() downstream.StreamInfo }

// New returns a gateway server. It loads the warm-restart file, if any.
func New(opts Options) (*Server, error) {
	if len(opts.Upstreams) == 0 {
		return nil, errors.New("gateway: no upstream server")
	}
	for _, f := range opts.GroupBy {
		switch f {
		case "node_id", "cluster", "supported_features":
		default:
			return nil, fmt.Errorf("gateway: group_by: unknown field %q", f)
		}
	}
	if opts.GroupBy == nil {
		opts.GroupBy = []string{"cluster"}
	}
	if opts.ReportRetries <= 0 {
		opts.ReportRetries = DefaultReportRetries
	}
	if opts.Linger <= 0 {
		opts.Linger = DefaultLinger
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.NewID == nil {
		var n atomic.Uint64
		opts.NewID = func() uint64 { return n.Add(1) }
	}
	if opts.NodeID == "" {
		opts.NodeID = "xds-relay"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{opts: opts, log: opts.Logger, m: opts.Metrics,
		ctx: ctx, cancel: cancel, sotw: make(map[string]*sotwGroup), delta: make(map[string]*deltaGroup),
		warm: &warmCache{}, streams: make(map[uint64]debugStream), conns: make(map[int]*grpc.ClientConn)}
	if p := opts.PersistPath; p != "" {
		s.warm = loadWarm(p, s.log)
		s.persist = newPersister(p, opts.PersistInterval, s.log.Named("persist"), s.m, s.currentCache)
	}
	s.reports = newReporter(s)
	s.wg.Go(s.reports.run)
	return s, nil
}

// Register adds ConfigurationDiscoveryService and DeltaDiscoveryService to g.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: controlv1.ConfigurationDiscoveryService_ServiceDesc.ServiceName,
		Methods:     []grpc.MethodDesc{{MethodName: "ReportStatus", Handler: s.reportHandler}},
		Streams: []grpc.StreamDesc{{StreamName: "StreamConfiguration", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error { return s.serveSotW(ss) }}},
		Metadata: controlv1.ConfigurationDiscoveryService_ServiceDesc.Metadata,
	}, nil)
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: controlv1.DeltaDiscoveryService_ServiceDesc.ServiceName,
		Streams: []grpc.StreamDesc{{StreamName: "DeltaStreamConfiguration", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error { return s.serveDelta(ss) }}},
		Metadata: controlv1.DeltaDiscoveryService_ServiceDesc.Metadata,
	}, nil)
}

// Close stops the upstream streams and the forwarder, writes the
// warm-restart file one last time and closes the upstream connections. Call
// it after the grpc.Server has stopped.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, g := range s.sotw {
		g.stopLinger()
	}
	for _, g := range s.delta {
		g.stopLinger()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	if s.persist != nil {
		s.persist.close()
	}
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, cc := range conns {
		_ = cc.Close()
	}
}

// conn returns the connection to upstream i, dialling it the first time.
func (s *Server) conn(i int) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("gateway: closed")
	}
	if cc := s.conns[i]; cc != nil {
		return cc, nil
	}
	creds := s.opts.Upstreams[i].Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	// Snapshots routinely exceed grpc's default 4 MiB: accept what the
	// relay's xDS upstream streams accept.
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(upstream.MaxRecvMsgSize))}
	for _, c := range s.opts.Upstreams[i].CallCreds {
		dopts = append(dopts, grpc.WithPerRPCCredentials(c))
	}
	cc, err := grpc.NewClient(s.opts.Upstreams[i].URI, dopts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: dial %s: %w", s.opts.Upstreams[i].URI, err)
	}
	s.conns[i] = cc
	return cc, nil
}

// session runs one upstream stream on cc and returns when it ends; it
// reports whether the server answered at all.
type session func(ctx context.Context, cc *grpc.ClientConn, server string) (answered bool, err error)

// runUpstream keeps a group's upstream stream open until ctx ends: on the
// first server, moving to the next one when a server does not answer, and
// back to the first after a stream that was answered; between attempts a
// jittered exponential backoff (100 ms to 10 s).
func (s *Server) runUpstream(ctx context.Context, log *zap.Logger, run session, state func(server string, connected bool)) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 10 * time.Second
	backoff := minBackoff
	i := 0
	for ctx.Err() == nil {
		server := s.opts.Upstreams[i].URI
		answered := false
		cc, err := s.conn(i)
		if err == nil {
			answered, err = run(ctx, cc, server)
			state(server, false)
		}
		if ctx.Err() != nil {
			return
		}
		log.Info("gateway upstream stream ended", zap.String("server", server), zap.Bool("answered", answered), zap.Error(err))
		if answered {
			i, backoff = 0, minBackoff
		} else {
			i = (i + 1) % len(s.opts.Upstreams)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// groupKey is a data plane's group: the fields of GroupBy, and for SotW its
// subscriptions. Fields outside GroupBy are "" in it.
type groupKey struct {
	nodeID, cluster string
	features        []string // sorted
	subs            []string // sorted, SotW only
}

func (s *Server) keyOf(nodeID, cluster string, features, subs []string) groupKey {
	k := groupKey{subs: sortedSet(subs)}
	for _, f := range s.opts.GroupBy {
		switch f {
		case "node_id":
			k.nodeID = nodeID
		case "cluster":
			k.cluster = cluster
		case "supported_features":
			k.features = sortedSet(features)
		}
	}
	return k
}

// String is the key as /debug/gateway and logs show it, and the group map's
// key: "cluster=blue,types=A+B".
func (k groupKey) String() string {
	var parts []string
	if k.nodeID != "" {
		parts = append(parts, "node_id="+k.nodeID)
	}
	if k.cluster != "" {
		parts = append(parts, "cluster="+k.cluster)
	}
	if len(k.features) > 0 {
		parts = append(parts, "features="+strings.Join(k.features, "+"))
	}
	if len(k.subs) > 0 {
		parts = append(parts, "types="+strings.Join(k.subs, "+"))
	}
	return strings.Join(parts, ",")
}

// upstreamIdentity is the node id and cluster a group presents upstream:
// the data planes' own where the key holds them, else the relay's, with the
// group appended to the id (the control plane tells groups apart).
func (s *Server) upstreamIdentity(k groupKey) (nodeID, cluster string) {
	nodeID, cluster = k.nodeID, k.cluster
	if nodeID == "" {
		nodeID = s.opts.NodeID
		if g := (groupKey{cluster: k.cluster, features: k.features}).String(); g != "" {
			nodeID += "/" + g
		}
	}
	if cluster == "" {
		cluster = s.opts.Cluster
	}
	return nodeID, cluster
}

func sortedSet(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// identity is what a data plane stream says it is, checked on every request.
type identity struct{ nodeID, cluster string }

// check validates a request's identity against the stream's (the first
// request sets it): node_id is required first, and neither may change.
func (id *identity) check(nodeID, cluster string) error {
	if id.nodeID == "" {
		if nodeID == "" {
			return status.Error(codes.InvalidArgument, "xds-relay: node_id is required on the first request")
		}
		id.nodeID, id.cluster = nodeID, cluster
		return nil
	}
	if (nodeID != "" && nodeID != id.nodeID) || (cluster != "" && cluster != id.cluster) {
		return status.Errorf(codes.InvalidArgument, "xds-relay: node changed mid-stream: first %q/%q, now %q/%q",
			id.nodeID, id.cluster, nodeID, cluster)
	}
	return nil
}

// checkTypes validates subscribed type URLs.
func checkTypes(types []string) error {
	if len(types) > maxSubscriptions {
		return status.Errorf(codes.ResourceExhausted, "xds-relay: %d subscriptions in one request, the limit is %d", len(types), maxSubscriptions)
	}
	for _, t := range types {
		if !keying.ValidTypeURL(t) {
			return status.Errorf(codes.InvalidArgument, "xds-relay: malformed type URL %q", t)
		}
	}
	return nil
}

// authorize asks Authorize for each type URL (name "*").
func (s *Server) authorize(p *authz.Principal, types ...string) error {
	az := s.opts.Authorize
	if az == nil {
		return nil
	}
	for _, t := range types {
		if err := az(p, t, keying.Wildcard); err != nil {
			s.m.RejectedRequests.WithLabelValues("permission_denied").Inc()
			s.log.Info("gateway subscription denied", zap.String("node", p.NodeID), zap.String("type", t), zap.Error(err))
			return status.Errorf(codes.PermissionDenied, "xds-relay: not allowed to subscribe to %s: %v", t, err)
		}
	}
	return nil
}

// pump reads requests of ss into a channel until the stream ends; the
// handler selects on it beside its wake-ups. It returns when RecvMsg fails
// (the stream ended or its handler returned).
func pump[T any](ss grpc.ServerStream, newReq func() *T) (<-chan *T, <-chan error) {
	reqs := make(chan *T)
	errc := make(chan error, 1)
	go func() {
		for {
			req := newReq()
			if err := ss.RecvMsg(req); err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-ss.Context().Done():
				errc <- ss.Context().Err()
				return
			}
		}
	}()
	return reqs, errc
}

// register lists an open stream for /debug/clients and counts it.
func (s *Server) register(id uint64, d debugStream, proto string) {
	s.mu.Lock()
	s.streams[id] = d
	s.mu.Unlock()
	s.m.DownstreamStreams.WithLabelValues(metrics.OtherType, proto).Inc()
	s.m.DownstreamClients.WithLabelValues(proto).Inc()
}

func (s *Server) unregister(id uint64, proto string) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
	s.m.DownstreamStreams.WithLabelValues(metrics.OtherType, proto).Dec()
	s.m.DownstreamClients.WithLabelValues(proto).Dec()
}

// Streams lists the open data plane streams for /debug/clients (those of
// nodeID when it is non-empty).
func (s *Server) Streams(nodeID string) []downstream.StreamInfo {
	s.mu.Lock()
	all := make([]debugStream, 0, len(s.streams))
	for _, d := range s.streams {
		all = append(all, d)
	}
	s.mu.Unlock()
	out := make([]downstream.StreamInfo, 0, len(all))
	for _, d := range all {
		if info := d.info(); nodeID == "" || info.NodeID == nodeID {
			info.Status = s.reports.status(info.NodeID)
			out = append(out, info)
		}
	}
	return out
}
