package lrs

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
)

// DefaultInterval is the load_reporting_interval clients are told before
// the upstream has answered (with send_all_clusters and no endpoint
// granularity): what the relay can say safely, since it forwards only what
// the upstream asks for.
const DefaultInterval = 10 * time.Second

// maxDecisions bounds the authorization decisions a client stream keeps.
const maxDecisions = 1024

// Upstream is one upstream LRS server: the same servers as the xDS ones.
type Upstream struct {
	URI       string
	Creds     credentials.TransportCredentials // nil: plaintext
	CallCreds []credentials.PerRPCCredentials
}

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// Upstreams are the default servers, in order. Without any, reports are
	// aggregated and dropped (counted).
	Upstreams []Upstream
	// Current returns the URI of the server that the relay's xDS stream of
	// authority ("": the default servers) for the node group ("": none) is
	// on now (or tries): the load goes there. Nil or "": the first server.
	Current func(authority, group string) string
	// Group returns the node group of a client's node under
	// keying.group_by, and the node the relay presents for it; "": none
	// (the relay's node). Nil: no groups.
	Group func(node *corev3.Node) (key string, groupNode *corev3.Node)
	// Authorities with servers of their own, by name: the load of clusters
	// named xdstp://AUTHORITY/... goes to them; the others' goes to
	// Upstreams.
	Authorities map[string]Authority
	// Node is the node the relay presents upstream.
	Node *corev3.Node
	// Authorize, when set, decides for each reported cluster whether the
	// client may report it: as for a subscription to the Cluster of that
	// name. Denied stats are dropped (counted).
	Authorize authz.Authorizer
	// MaxKeys bounds the aggregate's entries. Default DefaultMaxKeys.
	MaxKeys int
	// DefaultInterval is the interval clients are told before the upstream
	// answered, and the pace at which reports are dropped while it cannot
	// take them. Default DefaultInterval.
	DefaultInterval time.Duration
	// FirstAnswerWait is how long a new client's first answer waits for
	// the upstream's wishes before the relay answers with its default:
	// grpc-go keeps the interval and clusters of the first answer for the
	// stream's life. Default 2 s.
	FirstAnswerWait time.Duration
	// FlushTimeout bounds Close: how long the final flush of the interval
	// in flight waits for the upstreams to take it. Default 1 s.
	FlushTimeout time.Duration
	// RetryUnimplemented is how long the relay waits before asking again an
	// upstream that does not implement LRS. Default 5 minutes.
	RetryUnimplemented time.Duration
	// DialOptions are added to the upstream connections' (tests).
	DialOptions []grpc.DialOption
	Metrics     *metrics.Metrics // default: a fresh registry
	Logger      *zap.Logger
}

// Server serves envoy.service.load_stats.v3.LoadReportingService and
// forwards the aggregate of its clients' reports upstream.
type Server struct {
	lrsv3.UnimplementedLoadReportingServiceServer

	// set at creation, read-only
	opts Options
	log  *zap.Logger
	m    *metrics.Metrics
	ids  atomic.Uint64

	mu sync.Mutex
	// guarded by mu
	settings settings // what clients are told: the dests' merged
	streams  map[uint64]*clientStream
	dests    map[destKey]*dest // where the load goes
	closed   bool
}

// settings is what an upstream asked for (or the relay's default); the
// version, of what clients are told, grows at each change.
type settings struct {
	version     uint64
	clusters    []string
	all         bool
	interval    time.Duration
	granularity bool
}

// New returns a Server. A destination's forwarder starts with the first
// client stream (the default servers) or report that goes there, and runs
// until Close.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.DefaultInterval <= 0 {
		opts.DefaultInterval = DefaultInterval
	}
	if opts.FirstAnswerWait <= 0 {
		opts.FirstAnswerWait = 2 * time.Second
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = time.Second
	}
	if opts.RetryUnimplemented <= 0 {
		opts.RetryUnimplemented = 5 * time.Minute
	}
	s := &Server{opts: opts, log: opts.Logger, m: opts.Metrics, streams: map[uint64]*clientStream{}}
	s.settings = s.defaultSettings()
	s.settings.version = 1
	s.dests = map[destKey]*dest{}
	return s
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { lrsv3.RegisterLoadReportingServiceServer(g, s) }

// Close flushes the interval in flight to each upstream stream that is up
// (together, within Options.FlushTimeout), then stops the forwarders. Call
// it after the gRPC server stopped, so that the clients' last reports are
// in the flush.
func (s *Server) Close() { s.closeDests() }

// clientStream is one client's StreamLoadStats.
type clientStream struct {
	id        uint64
	ss        lrsv3.LoadReportingService_StreamLoadStatsServer
	principal *authz.Principal
	group     string        // node group key ("": none)
	groupNode *corev3.Node  // what the relay presents for the group
	wake      chan struct{} // one slot: the settings changed
	done      chan struct{} // closed when the handler ends
	// owned by the handler goroutine
	allowed map[string]bool
}

// StreamLoadStats answers a client with the current settings (and again
// at each change) and sums its reports into the aggregate. The client's
// node is in its first request (load_stats.proto).
func (s *Server) StreamLoadStats(ss lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	req, err := ss.Recv()
	if err != nil {
		return ignoreEOF(err)
	}
	cs := s.join(ss, req.GetNode())
	defer s.leave(cs)
	var sender sync.WaitGroup
	sender.Add(1)
	go func() {
		defer sender.Done()
		s.sendLoop(cs)
	}()
	defer sender.Wait()
	defer close(cs.done)
	for {
		s.report(cs, req)
		if req, err = ss.Recv(); err != nil {
			return ignoreEOF(err)
		}
	}
}

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// join registers a new client stream.
func (s *Server) join(ss lrsv3.LoadReportingService_StreamLoadStatsServer, node *corev3.Node) *clientStream {
	p := &authz.Principal{NodeID: node.GetId(), Cluster: node.GetCluster()}
	p.SPIFFEID, p.URISANs, p.MTLS = tlsconfig.PeerIdentity(ss.Context())
	cs := &clientStream{id: s.ids.Add(1), ss: ss, principal: p, wake: make(chan struct{}, 1),
		done: make(chan struct{}), allowed: map[string]bool{}}
	if s.opts.Group != nil {
		cs.group, cs.groupNode = s.opts.Group(node)
	}
	cs.wake <- struct{}{}
	s.mu.Lock()
	s.streams[cs.id] = cs
	// The default servers are asked when a client arrives, so that it
	// learns their wishes early; an authority's with its first report.
	s.destLocked(destKey{"", cs.group}, cs.groupNode)
	s.mu.Unlock()
	s.m.LRSClientStreams.Inc()
	s.log.Debug("LRS client stream", zap.Uint64("stream", cs.id), zap.String("node", p.NodeID))
	return cs
}

// leave forgets an ended client stream: its in-progress requests no longer
// count.
func (s *Server) leave(cs *clientStream) {
	s.mu.Lock()
	delete(s.streams, cs.id)
	s.mu.Unlock()
	for _, d := range s.allDests() {
		d.agg.Forget(cs.id)
	}
	s.m.LRSClientStreams.Dec()
}

// report sums one request's stats, those the client may report.
func (s *Server) report(cs *clientStream, req *lrsv3.LoadStatsRequest) {
	stats := req.GetClusterStats()
	if len(stats) == 0 {
		return
	}
	s.m.LRSReports.WithLabelValues(metrics.LRSReceived).Inc()
	if s.opts.Authorize != nil {
		kept := stats[:0:0]
		for _, c := range stats {
			if s.allows(cs, c.GetClusterName()) {
				kept = append(kept, c)
			}
		}
		if n := len(stats) - len(kept); n > 0 {
			s.m.LRSStatsDropped.WithLabelValues(DropDenied).Add(float64(n))
		}
		stats = kept
	}
	s.add(cs, stats)
}

// allows reports whether cs may report the load of cluster: whether it may
// subscribe to the Cluster of that name.
func (s *Server) allows(cs *clientStream, cluster string) bool {
	if ok, known := cs.allowed[cluster]; known {
		return ok
	}
	err := s.opts.Authorize(cs.principal, keying.ClusterType, cluster)
	if err != nil {
		s.log.Debug("LRS stats refused", zap.String("node", cs.principal.NodeID), zap.String("cluster", cluster),
			zap.Error(err))
	}
	if len(cs.allowed) < maxDecisions {
		cs.allowed[cluster] = err == nil
	}
	return err == nil
}

// sendLoop sends the settings to the client at start and at each change,
// until the handler ends or a send fails. The first answer waits for the
// client's default destination's upstream to answer, at most
// FirstAnswerWait.
func (s *Server) sendLoop(cs *clientStream) {
	hold := time.NewTimer(s.opts.FirstAnswerWait)
	defer hold.Stop()
	held := true
	var sent uint64
	for {
		select {
		case <-cs.done:
			return
		case <-cs.wake:
		case <-hold.C:
			held = false
		}
		if held && !s.answered(cs) {
			continue
		}
		held = false
		st := s.current()
		if st.version == sent {
			continue
		}
		if err := cs.ss.Send(st.response()); err != nil {
			return
		}
		sent = st.version
	}
}

// answered reports whether the upstream of cs's default destination has
// answered.
func (s *Server) answered(cs *clientStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destKey{"", cs.group}]
	return d != nil && d.answered
}

func (st settings) response() *lrsv3.LoadStatsResponse {
	return &lrsv3.LoadStatsResponse{Clusters: st.clusters, SendAllClusters: st.all,
		LoadReportingInterval: durationpb.New(st.interval), ReportEndpointGranularity: st.granularity}
}

func (s *Server) current() settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings
}

// keep returns the filter of the clusters st asks for (nil: all).
func (st settings) keep() func(string) bool {
	if st.all {
		return nil
	}
	return func(c string) bool {
		_, ok := slices.BinarySearch(st.clusters, c)
		return ok
	}
}
