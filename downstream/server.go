package downstream

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clustersvc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointsvc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionsvc "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenersvc "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routesvc "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimesvc "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretsvc "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// Source is what the server needs from the relay: the current View of the
// names a stream watches, and a notification whenever a View changes.
type Source interface {
	// Bind is called with a stream's first node; it may refuse the stream
	// with a gRPC status error.
	Bind(w Watcher, node *corev3.Node) error
	// Watch applies a subscription change of w for typeURL. When something
	// was added (or must be answered) it calls w.Notify with the current View
	// and those names (Wildcard for the wildcard) before returning, under the
	// same lock that orders every later Notify.
	Watch(w Watcher, typeURL string, c Change)
	// Cancel is called once when the stream ends, after it has removed its
	// watches with Watch.
	Cancel(w Watcher)
}

// Change is a stream's subscription change for one type.
type Change struct {
	// Add and Remove are the names subscribed and unsubscribed.
	Add, Remove []string
	// Wildcard turns the wildcard on or off; nil leaves it.
	Wildcard *bool
	// Answer are names to answer from the current View without watching
	// them (the stream was refused them: it answers with an error).
	Answer []string
	// Spellings maps keys of Add whose name the client wrote otherwise (an
	// xdstp name not in canonical form) to the key with its spelling: an
	// upstream subscription made for them uses it.
	Spellings map[string]string
}

func (c Change) empty() bool {
	return len(c.Add) == 0 && len(c.Remove) == 0 && c.Wildcard == nil && len(c.Answer) == 0
}

// Watcher receives View changes. Implemented by the server's streams.
type Watcher interface {
	// Notify queues the change v for the stream. force lists names that must
	// be sent even if unchanged. It never blocks.
	Notify(v *View, force []string)
	// NotifyRollout queues the change v of rollout r: for a canary, with its
	// verdict reported to r; for anyone else, as a barrier until r resolves.
	NotifyRollout(v *View, r Rollout, canary bool)
	// Wake resumes a stream that waits on a rollout.
	Wake()
	// ID identifies the stream (stable, unique per server).
	ID() uint64
}

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// MaxNamesPerRequest bounds the names one request subscribes and
	// unsubscribes (not its initial_resource_versions). Default 100000.
	MaxNamesPerRequest int
	// MaxSubscriptions bounds the names one stream subscribes to, all types
	// together. Default 100000. A request over either limit is refused for
	// its type alone; the stream goes on (overLimit).
	MaxSubscriptions int
	// NewStreamsPerSecond is the admission rate of new streams (burst of
	// the same size, at least one); 0 admits every stream.
	NewStreamsPerSecond float64
	// MaxSenders bounds the sender goroutines. Default 4 × GOMAXPROCS: a
	// send never blocks (see sendBudget), so more would only queue for the
	// CPUs.
	MaxSenders int
	// Authorize, when set, is asked for every subscribed name.
	Authorize authz.Authorizer
	// NodeParameters, when set, derives TP2 dynamic parameters from a
	// stream's node; they are added to every name it subscribes to without
	// a locator (clients that cannot send locators), and the variants are
	// sent to it plain.
	NodeParameters func(*corev3.Node) map[string]string
	// AnswerWait bounds how long make before break holds a full state for
	// a referrer whose copy in the relay no live upstream confirms
	// (View.Doubtful), or which the stream cannot read, waiting for the
	// upstream's word on it: past it the upstream is away or will not
	// answer, and holding on would freeze the type. A referrer withheld
	// because the relay's copy is unsure (View.Unsure) holds it until the
	// relay's own wait for that word ends instead. Default one second.
	AnswerWait time.Duration
	// MoveWait bounds how long after a removal arrived make before break
	// holds a full state that drops what the client may still refer to,
	// where the stream cannot keep it (the client brought it from
	// elsewhere) or cannot read the referrer: an upstream that sends a
	// snapshot type by type sends the referrer's move after the removal,
	// seconds after it when the snapshot holds tens of thousands of names.
	// It also bounds how long a client that came back with config, and has
	// not answered a response yet, may still ask for a type it holds: its
	// first requests of each type, ten thousand names each, may take that
	// long to arrive. Default one second.
	MoveWait time.Duration
	Logger   *zap.Logger
	// Metrics receives the server's metrics; nil: a registry of its own.
	Metrics *metrics.Metrics
}

// Server is the downstream xDS server. Create it with NewServer and add it to
// a grpc.Server built with its GRPCOptions by Register.
type Server struct {
	// set at creation, read-only
	src   Source
	opts  Options
	log   *zap.Logger
	logs  serverLogs // per-client events: sampled, or one line per episode
	m     *metrics.Metrics
	pool  *pool
	lim   *rate.Limiter // admission of new streams; nil: off
	sets  nameSets      // interned SotW subscriptions
	names namesTable    // SotW requests' names lists, shared by streams (recvnames.go)
	nodes nodeTable     // the streams' nodes, shared (nodes.go)
	// counters holds each (type, protocol)'s *typeCounters, shared by the
	// streams so a stream's type state keeps a pointer, not three.
	counters sync.Map

	conns    conns       // the connections of Listener, for Drain
	refusing atomic.Bool // SetRefusing: new streams are refused

	nextID atomic.Uint64

	mu      sync.Mutex
	streams map[uint64]*stream // guarded by mu
}

// NewServer returns a server answering from src.
func NewServer(src Source, opts Options) *Server {
	if opts.MaxNamesPerRequest <= 0 {
		opts.MaxNamesPerRequest = 100000
	}
	if opts.MaxSubscriptions <= 0 {
		opts.MaxSubscriptions = 100000
	}
	if opts.MaxSenders <= 0 {
		opts.MaxSenders = 4 * runtime.GOMAXPROCS(0)
	}
	if opts.AnswerWait <= 0 {
		opts.AnswerWait = referrerGrace
	}
	if opts.MoveWait <= 0 {
		opts.MoveWait = referrerGrace
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	return &Server{
		src:     src,
		opts:    opts,
		log:     opts.Logger,
		logs:    newServerLogs(opts.Logger),
		m:       opts.Metrics,
		pool:    newPool(min(2*runtime.GOMAXPROCS(0), opts.MaxSenders), opts.MaxSenders),
		lim:     newLimiter(opts.NewStreamsPerSecond),
		streams: make(map[uint64]*stream),
	}
}

// GRPCOptions are the options of the grpc.Server the server is registered
// on: ServerOptions, and the tap of admission control (without it every
// stream is admitted, draining or not).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return append(ServerOptions(), grpc.InTapHandle(s.tap))
}

// Close stops the sender pool. Call it after the grpc.Server has stopped.
func (s *Server) Close() {
	s.pool.close()
	s.logs.held.Close()
}

// perType maps each per-type discovery service to the type it serves.
var perType = []struct {
	desc    *grpc.ServiceDesc
	typeURL string
}{
	{&listenersvc.ListenerDiscoveryService_ServiceDesc, keying.ListenerType},
	{&routesvc.RouteDiscoveryService_ServiceDesc, keying.RouteType},
	{&routesvc.ScopedRoutesDiscoveryService_ServiceDesc, keying.ScopedRouteType},
	{&routesvc.VirtualHostDiscoveryService_ServiceDesc, keying.VirtualHostType},
	{&clustersvc.ClusterDiscoveryService_ServiceDesc, keying.ClusterType},
	{&endpointsvc.EndpointDiscoveryService_ServiceDesc, keying.EndpointType},
	{&secretsvc.SecretDiscoveryService_ServiceDesc, keying.SecretType},
	{&runtimesvc.RuntimeDiscoveryService_ServiceDesc, keying.RuntimeType},
	{&extensionsvc.ExtensionConfigDiscoveryService_ServiceDesc, keying.ExtensionConfigType},
}

// Register adds the ADS service and every per-type service to g. Every
// method of them is served by the same state machine; Fetch (REST-style
// unary) methods are not served.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(s.desc(&discoverygrpc.AggregatedDiscoveryService_ServiceDesc, ""), nil)
	for _, p := range perType {
		g.RegisterService(s.desc(p.desc, p.typeURL), nil)
	}
}

// desc copies a generated service description, keeping its names and
// pointing its streams at the server.
func (s *Server) desc(gen *grpc.ServiceDesc, typeURL string) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: gen.ServiceName, Metadata: gen.Metadata}
	for _, sd := range gen.Streams {
		delta := strings.HasPrefix(sd.StreamName, "Delta")
		sd.Handler = func(_ any, ss grpc.ServerStream) error {
			return s.serve(ss, typeURL, delta)
		}
		d.Streams = append(d.Streams, sd)
	}
	return d
}

// Streams returns a snapshot of every stream's state, those of nodeID only
// when it is non-empty.
func (s *Server) Streams(nodeID string) []StreamInfo {
	s.mu.Lock()
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	out := make([]StreamInfo, 0, len(all))
	for _, st := range all {
		st.mu.Lock()
		mine := nodeID == "" || st.nodeID == nodeID
		st.mu.Unlock()
		if mine {
			out = append(out, st.info(nodeID != ""))
		}
	}
	return out
}

// StreamFilter selects streams for StreamsPage. Zero fields match every
// stream.
type StreamFilter struct {
	// Node, when set, is asked whether a stream's node id matches.
	Node func(nodeID string) bool
	// Type is a type URL, or its last segment ("Cluster"): streams that
	// requested that type.
	Type string
	// Name is a resource name: streams subscribed to it (of Type when set).
	Name string
}

// StreamsPage returns, sorted by stream id, at most limit streams matching f
// whose id is above after, and how many streams match f in all. It builds
// the StreamInfo of the page's streams only.
func (s *Server) StreamsPage(f StreamFilter, after uint64, limit int) (page []StreamInfo, total int) {
	s.mu.Lock()
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *stream) int { return cmp.Compare(a.id, b.id) })
	page = []StreamInfo{}
	for _, st := range all {
		if !st.matches(f) {
			continue
		}
		total++
		if st.id > after && len(page) < limit {
			page = append(page, st.info(false))
		}
	}
	return page, total
}

// matches reports whether st is selected by f.
func (st *stream) matches(f StreamFilter) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if f.Node != nil && !f.Node(st.nodeID) {
		return false
	}
	if f.Type == "" && f.Name == "" {
		return true
	}
	key := canonical(f.Name)
	for t, ts := range st.types {
		if f.Type != "" && t != f.Type && keying.ShortType(t) != f.Type {
			continue
		}
		if f.Name == "" {
			return true
		}
		if _, ok := ts.names[key]; ok {
			return true
		}
	}
	return false
}
