// Package gatewaycp is a small gateway.control.v1 control plane, built from
// the project's own proto (no third-party gateway binaries exist here). The control plane serves per-cluster snapshots over
// StreamConfiguration, their resources over DeltaStreamConfiguration, and
// records status reports; it is the upstream of the gateway tests and of
// xds-democp --dialect gateway. The tests' data planes are in internal/xdstest
// (DialGatewaySotW, DialGatewayDelta), so this package, which xds-democp
// ships, does not import testing.
//
// Server methods are safe for concurrent use. Each stream has its handler
// goroutine (the only sender) and a receive pump; Set wakes streams through
// one-slot channels.
package gatewaycp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// ACK and NACK are the result statuses a data plane sends.
const (
	ACK  = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_ACK
	NACK = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK
)

// maxRecorded bounds the requests and reports kept for Requests and Reports.
const maxRecorded = 10000

// Request is one request the control plane received (Sotw or Delta set).
type Request struct {
	Sotw  *controlv1.DiscoveryRequest
	Delta *controlv1.DeltaDiscoveryRequest
}

// Server is the control plane. Create it with Start.
type Server struct {
	gen atomic.Uint64

	// set at creation, read-only
	addr string

	mu       sync.Mutex
	clusters map[string]*cluster // by the request's cluster
	streams  map[streamer]struct{}
	requests []Request
	sent     []Sent
	reports  []*controlv1.StatusReport
	failNext int // reports to refuse with UNAVAILABLE
	changed  chan struct{}
	grpc     *grpc.Server
	done     chan struct{}
}

// streamer is an open stream, woken when its cluster changes.
type streamer interface {
	wakeFor(cluster string)
}

// member is what both kinds of stream share: their cluster (set by the
// first request) and the one-slot wake-up of a change of it.
type member struct {
	wake    chan struct{}
	mu      sync.Mutex
	cluster string // guarded by mu
}

func newMember() member { return member{wake: make(chan struct{}, 1)} }

// join sets the stream's cluster from its first request.
func (m *member) join(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cluster == "" {
		m.cluster = cluster
	}
}

func (m *member) clusterName() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cluster
}

func (m *member) wakeFor(c string) {
	if m.clusterName() == c {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// track lists st while it is open, for Set to wake; the returned func
// forgets it.
func (s *Server) track(st streamer) func() {
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	}
}

// cluster is one cluster's configuration. Immutable once published.
type cluster struct {
	version   string
	snap      *controlv1.ConfigSnapshot
	resources map[string]map[string]*resource // type URL → name →
}

type resource struct {
	version string
	msg     *controlv1.Resource
}

// Start serves a control plane on addr ("127.0.0.1:0" for any port).
func Start(addr string) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(lis), nil
}

// Serve serves a control plane on lis.
func Serve(lis net.Listener) *Server {
	s := &Server{addr: lis.Addr().String(), clusters: make(map[string]*cluster), streams: make(map[streamer]struct{}),
		changed: make(chan struct{})}
	s.serve(lis)
	return s
}

func (s *Server) serve(lis net.Listener) {
	g := grpc.NewServer()
	controlv1.RegisterConfigurationDiscoveryServiceServer(g, sotwService{Server: s})
	controlv1.RegisterDeltaDiscoveryServiceServer(g, deltaService{Server: s})
	done := make(chan struct{})
	s.mu.Lock()
	s.grpc, s.done = g, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
}

// Addr is the control plane's address.
func (s *Server) Addr() string { return s.addr }

// Stop stops serving (every stream ends) and waits; Restart serves again on
// the same address with the same configuration.
func (s *Server) Stop() {
	s.mu.Lock()
	g, done := s.grpc, s.done
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
		<-done
	}
}

// Restart serves again on the address after Stop.
func (s *Server) Restart(ctx context.Context) error {
	for {
		lis, err := net.Listen("tcp", s.addr)
		if err == nil {
			s.serve(lis)
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond): // the old socket may linger briefly
		}
	}
}

// Set publishes a new snapshot of cluster (version "v<N>", N counting every
// Set) and pushes it, and its changed resources, to the cluster's streams.
func (s *Server) Set(clusterName string, snap *controlv1.ConfigSnapshot) string {
	c := &cluster{version: "v" + strconv.FormatUint(s.gen.Add(1), 10), snap: proto.Clone(snap).(*controlv1.ConfigSnapshot),
		resources: resourcesOf(snap)}
	s.mu.Lock()
	s.clusters[clusterName] = c
	streams := make([]streamer, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.wakeFor(clusterName)
	}
	return c.version
}

// Snapshot returns the current snapshot and version of a cluster.
func (s *Server) Snapshot(clusterName string) (*controlv1.ConfigSnapshot, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clusters[clusterName]
	if c == nil {
		return nil, ""
	}
	return c.snap, c.version
}

// Resources returns what the control plane serves of typeURL to cluster
// over Delta: resource name → version.
func (s *Server) Resources(clusterName, typeURL string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string)
	if c := s.clusters[clusterName]; c != nil {
		for n, r := range c.resources[typeURL] {
			out[n] = r.version
		}
	}
	return out
}

func (s *Server) cluster(name string) *cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusters[name]
}

// ResourceName is the name a resource has as a Delta resource.
func ResourceName(m proto.Message) string {
	switch r := m.(type) {
	case *controlv1.Listener:
		return r.GetName() + "/" + strconv.FormatUint(uint64(r.GetPort()), 10)
	case *controlv1.HttpRoute:
		return r.GetNamespace() + "/" + r.GetName()
	case *controlv1.GrpcRoute:
		return r.GetNamespace() + "/" + r.GetName()
	case *controlv1.StreamRoute:
		return r.GetNamespace() + "/" + r.GetName()
	case *controlv1.BackendCluster:
		return r.GetName()
	case *controlv1.SecretMaterial:
		return r.GetName()
	}
	return ""
}

// resourcesOf splits a snapshot into its resources, each versioned by a
// hash of its content.
func resourcesOf(snap *controlv1.ConfigSnapshot) map[string]map[string]*resource {
	out := make(map[string]map[string]*resource)
	add := func(typeURL string, m proto.Message) {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		sum := sha256.Sum256(b)
		a := &anypb.Any{TypeUrl: typeURL, Value: b}
		name := ResourceName(m)
		if out[typeURL] == nil {
			out[typeURL] = make(map[string]*resource)
		}
		v := hex.EncodeToString(sum[:8])
		out[typeURL][name] = &resource{version: v, msg: &controlv1.Resource{Name: name, Version: v, Resource: a}}
	}
	for _, r := range snap.GetListeners() {
		add(controlv1.ListenerType, r)
	}
	for _, r := range snap.GetHttpRoutes() {
		add(controlv1.HttpRouteType, r)
	}
	for _, r := range snap.GetGrpcRoutes() {
		add(controlv1.GrpcRouteType, r)
	}
	for _, r := range snap.GetStreamRoutes() {
		add(controlv1.StreamRouteType, r)
	}
	for _, r := range snap.GetBackends() {
		add(controlv1.BackendClusterType, r)
	}
	for _, r := range snap.GetSecrets() {
		add(controlv1.SecretMaterialType, r)
	}
	return out
}

// filter returns snap with only the subscribed types ("The control plane
// only pushes resources the data plane has subscribed to"; none: all).
func filter(snap *controlv1.ConfigSnapshot, subs []string) *controlv1.ConfigSnapshot {
	if len(subs) == 0 {
		return snap
	}
	out := proto.Clone(snap).(*controlv1.ConfigSnapshot)
	want := func(t string) bool { return slices.Contains(subs, t) }
	if !want(controlv1.ListenerType) {
		out.Listeners = nil
	}
	if !want(controlv1.HttpRouteType) {
		out.HttpRoutes = nil
	}
	if !want(controlv1.GrpcRouteType) {
		out.GrpcRoutes = nil
	}
	if !want(controlv1.StreamRouteType) {
		out.StreamRoutes = nil
	}
	if !want(controlv1.BackendClusterType) {
		out.Backends = nil
	}
	if !want(controlv1.SecretMaterialType) {
		out.Secrets = nil
	}
	return out
}

// record keeps a request for Requests and wakes WaitRequest.
func (s *Server) record(r Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r)
	if len(s.requests) > maxRecorded {
		s.requests = s.requests[len(s.requests)-maxRecorded:]
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Sent is one response the control plane sent: to which node and cluster,
// at which cluster version, and for Delta of which type ("" for a snapshot).
type Sent struct {
	NodeID, Cluster, Version, TypeURL string
}

// recordSent keeps a response for SentLog; it is recorded before it is
// sent, so the log holds at least what the receiver may have.
func (s *Server) recordSent(r Sent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, r)
	if len(s.sent) > maxRecorded {
		s.sent = s.sent[len(s.sent)-maxRecorded:]
	}
}

// SentLog returns the responses sent so far (the last 10000), oldest first.
func (s *Server) SentLog() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// OpenStreams returns the number of open streams (SotW and Delta).
func (s *Server) OpenStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Requests returns the requests received so far (the last 10000).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Reports returns the status reports received so far (the last 10000).
func (s *Server) Reports() []*controlv1.StatusReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reports)
}

// FailReports makes the next n ReportStatus calls fail with UNAVAILABLE.
func (s *Server) FailReports(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

// Wait waits until cond holds of the recorded requests and reports.
func (s *Server) Wait(ctx context.Context, cond func(reqs []Request, reports []*controlv1.StatusReport) bool) error {
	for {
		s.mu.Lock()
		ok := cond(s.requests, s.reports)
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// pump feeds a stream's requests to its handler goroutine.
func pump[T any](ctx context.Context, recv func() (*T, error)) (<-chan *T, <-chan error) {
	reqs := make(chan *T)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
		}
	}()
	return reqs, errc
}

// initialVersions decodes initial_resource_versions (ignoring bad JSON:
// such a type is sent in full).
func initialVersions(m map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string)
	for t, js := range m {
		var vs map[string]string
		if json.Unmarshal([]byte(js), &vs) == nil {
			out[t] = vs
		}
	}
	return out
}
