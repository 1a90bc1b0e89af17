package rest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
)

// Types maps the suffix of POST /v3/discovery:SUFFIX to the type it serves
// (the paths Envoy's REST subscriptions use).
var Types = map[string]string{
	"listeners":         keying.ListenerType,
	"routes":            keying.RouteType,
	"scoped-routes":     keying.ScopedRouteType,
	"clusters":          keying.ClusterType,
	"endpoints":         keying.EndpointType,
	"secrets":           keying.SecretType,
	"runtime":           keying.RuntimeType,
	"extension_configs": keying.ExtensionConfigType,
}

// Defaults of Options.
const (
	DefaultPollTimeout  = 30 * time.Second
	DefaultMaxBodyBytes = 4 << 20
	DefaultMaxNames     = 10000
	DefaultMaxPolls     = 10000
	// memoryNodes bounds the (node, type) pairs whose last answer, NACK and
	// canary verdict are remembered between polls.
	memoryNodes = 100000
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// PollTimeout is how long an unchanged poll is held before 304.
	// Default 30s.
	PollTimeout time.Duration
	// MaxBodyBytes bounds a request body. Default 4 MiB.
	MaxBodyBytes int64
	// MaxNames bounds the names of one request. Default 10000.
	MaxNames int
	// MaxPolls bounds the polls held at once; more are answered 429.
	// Default 10000.
	MaxPolls int
	// Authorize, when set, is asked for every subscribed name (as the gRPC
	// server does).
	Authorize authz.Authorizer
	// NodeParameters, when set, derives TP2 dynamic parameters from a node,
	// added to every name it asks for (keying.dynamic_parameters_from_node).
	NodeParameters func(*corev3.Node) map[string]string
	// NewID returns a watcher id unique among the Source's watchers.
	// Required.
	NewID  func() uint64
	Logger *zap.Logger
	// Metrics must be set.
	Metrics *metrics.Metrics
}

// Server serves REST-JSON polls from a Source. Create it with New; Handler
// is its HTTP handler.
type Server struct {
	// set at creation, read-only
	src  downstream.Source
	opts Options
	log  *zap.Logger
	m    *metrics.Metrics
	done chan struct{} // closed by Close: held polls end

	closeOnce sync.Once
	refusing  atomic.Bool // SetRefusing: new polls are answered 503

	mu     sync.Mutex
	polls  map[uint64]*poll                   // guarded by mu: the polls being held
	memory *simplelru.LRU[memoryKey, *memory] // guarded by mu, and so are the memories
	bodies *simplelru.LRU[bodyKey, []byte]    // guarded by mu: encoded answers
}

// memoryKey names what one node polls for one type.
type memoryKey struct{ node, typeURL string }

// memory is what the relay remembers of a node's polls of one type.
type memory struct {
	sent   string // the version of the last 200 answer
	acked  string // the last version whose ACK was counted (re-polls of it are not ACKs again)
	nacked string // a version the node rejected: not served to it again
	// canary is the rollout the last answer carried to this node as a
	// canary; its verdict comes with the next poll, reported for canaryW.
	canary  downstream.Rollout
	canaryW downstream.Watcher
	// canarySeq is the Seq of the View that answer was built from.
	canarySeq uint64
	// trial is the rollout the node was last a canary of: a poll is a new
	// watcher, not the canary, and would be sent the accepted versions
	// behind a barrier while the node holds the rolled-out ones.
	trial downstream.Rollout
}

// bodyKey names an encoded answer: a type's resources at one version.
type bodyKey struct{ typeURL, version string }

// New returns a server answering from src.
func New(src downstream.Source, opts Options) *Server {
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxNames <= 0 {
		opts.MaxNames = DefaultMaxNames
	}
	if opts.MaxPolls <= 0 {
		opts.MaxPolls = DefaultMaxPolls
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	mem, _ := simplelru.NewLRU[memoryKey, *memory](memoryNodes, nil)
	bodies, _ := simplelru.NewLRU[bodyKey, []byte](64, nil)
	return &Server{src: src, opts: opts, log: opts.Logger, m: opts.Metrics, done: make(chan struct{}),
		polls: make(map[uint64]*poll), memory: mem, bodies: bodies}
}

// Close ends every held poll (answered 503) and refuses new ones. Call it
// before shutting the HTTP server down, so that the shutdown does not wait
// for the poll timeout.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// Handler returns the HTTP handler: POST /v3/discovery:TYPE. Other methods
// get 405, other paths 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v3/{discovery}", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "xds-relay: REST-JSON polls are POST requests")
			return
		}
		s.serve(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "xds-relay: REST-JSON serves POST /v3/discovery:TYPE with TYPE one of "+typeList())
	})
	return mux
}

func typeList() string {
	names := make([]string, 0, len(Types))
	for n := range Types {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// httpError is a refused request: its HTTP status, metrics reason and message.
type httpError struct {
	code   int
	reason string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(reason, format string, args ...any) *httpError {
	return &httpError{code: http.StatusBadRequest, reason: reason, msg: "xds-relay: " + fmt.Sprintf(format, args...)}
}

// decodeRequest parses a request body for the type at typeURL: proto3
// canonical JSON of a DiscoveryRequest (unknown fields ignored, as newer
// clients may send them).
func decodeRequest(body []byte, typeURL string, maxNames int) (*discoverypb.DiscoveryRequest, error) {
	req := &discoverypb.DiscoveryRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, req); err != nil {
		return nil, badRequest("malformed_json", "the body is not a DiscoveryRequest in proto3 JSON: %v", err)
	}
	switch t := req.GetTypeUrl(); {
	case t == "":
		req.TypeUrl = typeURL
	case t != typeURL:
		return nil, badRequest("wrong_type_url", "type_url %q on the endpoint of %s", t, typeURL)
	}
	if len(req.GetResourceLocators()) > 0 {
		return nil, badRequest("unsupported_locators", "resource_locators (TP2) are served over gRPC only")
	}
	if n := len(req.GetResourceNames()); n > maxNames {
		return nil, &httpError{code: http.StatusRequestEntityTooLarge, reason: "too_many_names",
			msg: fmt.Sprintf("xds-relay: %d resource names in one request, the limit is %d", n, maxNames)}
	}
	for _, n := range req.GetResourceNames() {
		if strings.IndexByte(n, 0) >= 0 {
			return nil, badRequest("malformed_name", "resource name %q contains a NUL byte", n)
		}
	}
	return req, nil
}

// serve answers one poll.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	suffix, ok := strings.CutPrefix(r.PathValue("discovery"), "discovery:")
	typeURL := Types[suffix]
	if !ok || typeURL == "" {
		writeError(w, http.StatusNotFound, "xds-relay: unknown REST-JSON endpoint "+r.URL.Path+"; TYPE is one of "+typeList())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.refuse(w, &httpError{code: http.StatusRequestEntityTooLarge, reason: "message_too_large",
				msg: fmt.Sprintf("xds-relay: request body over %d bytes", s.opts.MaxBodyBytes)})
		}
		return // the client went away
	}
	req, err := decodeRequest(body, typeURL, s.opts.MaxNames)
	if err != nil {
		s.refuse(w, err)
		return
	}
	p, err := s.start(r, req)
	if err != nil {
		s.refuse(w, err)
		return
	}
	defer s.end(p)
	p.hold(w, r)
}

// SetRefusing turns the refusal of new polls on or off: while on, each is
// answered 503 with Retry-After, so that pollers go to another replica as
// xDS clients do (the relay's reversible drain); polls already held end at
// their next answer or timeout.
func (s *Server) SetRefusing(on bool) { s.refusing.Store(on) }

// refuse answers a refused request and counts it.
func (s *Server) refuse(w http.ResponseWriter, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{code: http.StatusInternalServerError, reason: "internal", msg: err.Error()}
	}
	s.m.RejectedRequests.WithLabelValues(he.reason).Inc()
	s.log.Debug("REST request refused", zap.Int("status", he.code), zap.String("reason", he.msg))
	if he.code == http.StatusTooManyRequests || he.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, he.code, he.msg)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

// statusError maps a gRPC status from the Source to an HTTP error.
func statusError(err error) *httpError {
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.PermissionDenied, codes.Unauthenticated:
		code = http.StatusForbidden
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	}
	return &httpError{code: code, reason: "refused", msg: status.Convert(err).Message()}
}

// start registers a poll and subscribes it: it is counted and listed from
// here until end.
func (s *Server) start(r *http.Request, req *discoverypb.DiscoveryRequest) (*poll, error) {
	select {
	case <-s.done:
		return nil, &httpError{code: http.StatusServiceUnavailable, reason: "shutting_down", msg: "xds-relay: shutting down"}
	default:
	}
	if s.refusing.Load() {
		return nil, &httpError{code: http.StatusServiceUnavailable, reason: "draining", msg: "xds-relay: draining, poll another replica"}
	}
	node := req.GetNode()
	if node == nil {
		node = &corev3.Node{} // served as an anonymous node, as gRPC streams are
	}
	p := &poll{s: s, id: s.opts.NewID(), typeURL: req.GetTypeUrl(), node: node, peer: r.RemoteAddr,
		version: req.GetVersionInfo(), started: time.Now(), wake: make(chan struct{}, 1)}
	p.principal = &authz.Principal{NodeID: node.GetId(), Cluster: node.GetCluster()}
	p.principal.SPIFFEID, p.principal.URISANs, p.principal.MTLS = tlsconfig.StateIdentity(r.TLS)
	p.subscription(req.GetResourceNames())
	if err := p.authorize(); err != nil {
		return nil, err
	}

	s.mu.Lock()
	if len(s.polls) >= s.opts.MaxPolls {
		s.mu.Unlock()
		return nil, &httpError{code: http.StatusTooManyRequests, reason: "too_many_polls",
			msg: fmt.Sprintf("xds-relay: %d REST polls held, the limit; retry", s.opts.MaxPolls)}
	}
	p.mem = s.memoryLocked(p)
	s.polls[p.id] = p
	s.mu.Unlock()
	s.m.DownstreamStreams.WithLabelValues(metrics.TypeLabel(p.typeURL), protocolREST).Inc()
	s.m.DownstreamClients.WithLabelValues(protocolREST).Inc()

	p.verdict(req)
	p.trial = s.trial(p)
	if err := s.src.Bind(p, node); err != nil {
		s.cancel(p)
		return nil, statusError(err)
	}
	p.watching = true
	s.src.Watch(p, p.typeURL, p.change(true))
	return p, nil
}

// trial returns the pending rollout p's node is a canary of, if any, and
// forgets one that resolved.
func (s *Server) trial(p *poll) downstream.Rollout {
	s.mu.Lock()
	r := p.mem.trial
	s.mu.Unlock()
	if r == nil || r.State() == downstream.RolloutPending {
		return r
	}
	s.mu.Lock()
	if p.mem.trial == r {
		p.mem.trial = nil
	}
	s.mu.Unlock()
	return nil
}

// protocolREST is the protocol label of REST polls.
const protocolREST = "rest"

// end unsubscribes a poll and forgets it.
func (s *Server) end(p *poll) {
	if p.watching {
		s.src.Watch(p, p.typeURL, p.change(false))
	}
	s.cancel(p)
}

// cancel ends a poll's binding and forgets it.
func (s *Server) cancel(p *poll) {
	s.src.Cancel(p)
	s.forget(p)
}

func (s *Server) forget(p *poll) {
	s.mu.Lock()
	delete(s.polls, p.id)
	s.mu.Unlock()
	s.m.DownstreamStreams.WithLabelValues(metrics.TypeLabel(p.typeURL), protocolREST).Dec()
	s.m.DownstreamClients.WithLabelValues(protocolREST).Dec()
}

// memoryLocked returns what is remembered of p's node for p's type (a fresh
// memory for an anonymous node). Called with mu held.
func (s *Server) memoryLocked(p *poll) *memory {
	id := p.node.GetId()
	if id == "" {
		return &memory{}
	}
	k := memoryKey{node: id, typeURL: p.typeURL}
	m, ok := s.memory.Get(k)
	if !ok {
		m = &memory{}
		s.memory.Add(k, m)
	}
	return m
}

// Polls lists the polls being held, for /debug/clients, sorted by id.
func (s *Server) Polls() []downstream.StreamInfo {
	s.mu.Lock()
	ps := make([]*poll, 0, len(s.polls))
	for _, p := range s.polls {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	out := make([]downstream.StreamInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	slices.SortFunc(out, func(a, b downstream.StreamInfo) int { return int(a.ID) - int(b.ID) })
	return out
}
