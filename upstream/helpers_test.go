package upstream_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// notifier lets tests wait for "something was recorded".
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// eventually waits until check returns true, re-checking on every broadcast
// of n, for at most waitTimeout.
func eventually(t *testing.T, n *notifier, what string, check func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		ch := n.changed()
		if check() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// request is one request a test server received, before the server's code
// saw (and possibly modified) it.
type request struct {
	stream int // 1-based stream number, over the server's restarts
	sotw   *discoveryv3.DiscoveryRequest
	delta  *discoveryv3.DeltaDiscoveryRequest
}

// testServer is a gRPC server on 127.0.0.1 that records every request it
// receives and can be stopped and restarted on the same port.
type testServer struct {
	t        *testing.T
	register func(*grpc.Server)
	addr     string

	mu      sync.Mutex
	srv     *grpc.Server
	reqs    []request
	streams int
	n       notifier
}

func startServer(t *testing.T, register func(*grpc.Server)) *testServer {
	t.Helper()
	s := &testServer{t: t, register: register, addr: "127.0.0.1:0"}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) start() {
	s.t.Helper()
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen %s: %v", s.addr, err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(s.intercept))
	s.register(srv)
	s.mu.Lock()
	s.addr = lis.Addr().String()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
}

// stop closes the listener and every connection, and waits for the handlers.
func (s *testServer) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

func (s *testServer) restart() {
	s.stop()
	s.start()
}

func (s *testServer) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s.mu.Lock()
	s.streams++
	id := s.streams
	s.mu.Unlock()
	return h(srv, &recordingStream{ServerStream: ss, s: s, id: id})
}

type recordingStream struct {
	grpc.ServerStream
	s  *testServer
	id int
}

func (r *recordingStream) RecvMsg(m any) error {
	if err := r.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rec := request{stream: r.id}
	switch m := m.(type) {
	case *discoveryv3.DiscoveryRequest:
		rec.sotw = proto.Clone(m).(*discoveryv3.DiscoveryRequest)
	case *discoveryv3.DeltaDiscoveryRequest:
		rec.delta = proto.Clone(m).(*discoveryv3.DeltaDiscoveryRequest)
	}
	r.s.mu.Lock()
	r.s.reqs = append(r.s.reqs, rec)
	r.s.mu.Unlock()
	r.s.n.broadcast()
	return nil
}

// next waits for the first request at or after *cur that matches pred, and
// moves *cur past it.
func (s *testServer) next(t *testing.T, cur *int, what string, pred func(request) bool) request {
	t.Helper()
	var found request
	eventually(t, &s.n, what, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i := *cur; i < len(s.reqs); i++ {
			if pred(s.reqs[i]) {
				found, *cur = s.reqs[i], i+1
				return true
			}
		}
		return false
	})
	return found
}

// nextSotW waits for the next SotW request of typeURL.
func (s *testServer) nextSotW(t *testing.T, cur *int, typeURL string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	return s.next(t, cur, "SotW request for "+typeURL, func(r request) bool {
		return r.sotw != nil && r.sotw.GetTypeUrl() == typeURL
	}).sotw
}

// nextDelta waits for the next Delta request of typeURL.
func (s *testServer) nextDelta(t *testing.T, cur *int, typeURL string) *discoveryv3.DeltaDiscoveryRequest {
	t.Helper()
	return s.next(t, cur, "Delta request for "+typeURL, func(r request) bool {
		return r.delta != nil && r.delta.GetTypeUrl() == typeURL
	}).delta
}

// requests returns a copy of everything recorded so far.
func (s *testServer) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// controlPlane is a real go-control-plane v0.14.0 ADS server (SotW and
// Delta) backed by one LinearCache per type.
type controlPlane struct {
	*testServer
	caches map[string]*cachev3.LinearCache
}

// testTypes are the types every controlPlane serves.
var testTypes = []string{keying.ClusterType, keying.EndpointType, keying.ListenerType, keying.RouteType}

// startControlPlane starts a go-control-plane server. With sotwOnly, the
// gRPC server registers only the SotW ADS method, so Delta streams are
// answered with codes.Unimplemented.
func startControlPlane(t *testing.T, sotwOnly bool) *controlPlane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cachev3.Cache{},
	}
	cp := &controlPlane{caches: map[string]*cachev3.LinearCache{}}
	for _, typ := range testTypes {
		lc := cachev3.NewLinearCache(typ)
		cp.caches[typ] = lc
		mux.Caches[typ] = lc
	}
	xds := serverv3.NewServer(ctx, mux, nil)
	cp.testServer = startServer(t, func(g *grpc.Server) {
		if sotwOnly {
			discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, sotwOnlyADS{xds: xds})
		} else {
			discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, xds)
		}
	})
	return cp
}

// sotwOnlyADS is an ADS server without DeltaAggregatedResources.
type sotwOnlyADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	xds serverv3.Server
}

func (s sotwOnlyADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return s.xds.StreamAggregatedResources(st)
}

// set creates or replaces resources of typ.
func (cp *controlPlane) set(t *testing.T, typ string, res ...types.Resource) {
	t.Helper()
	m := make(map[string]types.Resource, len(res))
	for _, r := range res {
		m[cachev3.GetResourceName(r)] = r
	}
	if err := cp.caches[typ].UpdateResources(m, nil); err != nil {
		t.Fatalf("update %s: %v", typ, err)
	}
}

// del deletes resources of typ.
func (cp *controlPlane) del(t *testing.T, typ string, names ...string) {
	t.Helper()
	if err := cp.caches[typ].UpdateResources(nil, names); err != nil {
		t.Fatalf("delete %s: %v", typ, err)
	}
}

func cluster(name string) *clusterv3.Cluster { return &clusterv3.Cluster{Name: name} }

func listener(name string) *listenerv3.Listener { return &listenerv3.Listener{Name: name} }

func endpoints(name string) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name}
}

// recorder is the Handler used by the tests.
type recorder struct {
	mu      sync.Mutex
	updates []upstream.Update
	states  []stateEvent
	reject  func(upstream.Update) error
	n       notifier
}

type stateEvent struct {
	server    string
	connected bool
	err       error
}

func (r *recorder) OnUpdate(u upstream.Update) error {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	reject := r.reject
	r.mu.Unlock()
	r.n.broadcast()
	if reject != nil {
		return reject(u)
	}
	return nil
}

func (r *recorder) OnState(server string, connected bool, err error) {
	r.mu.Lock()
	r.states = append(r.states, stateEvent{server, connected, err})
	r.mu.Unlock()
	r.n.broadcast()
}

func (r *recorder) setReject(f func(upstream.Update) error) {
	r.mu.Lock()
	r.reject = f
	r.mu.Unlock()
}

// nextUpdate waits for the first update at or after *cur of typeURL.
func (r *recorder) nextUpdate(t *testing.T, cur *int, typeURL string) upstream.Update {
	t.Helper()
	var found upstream.Update
	eventually(t, &r.n, "update for "+typeURL, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := *cur; i < len(r.updates); i++ {
			if r.updates[i].TypeURL == typeURL {
				found, *cur = r.updates[i], i+1
				return true
			}
		}
		return false
	})
	return found
}

// numUpdates returns how many updates were recorded.
func (r *recorder) numUpdates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.updates)
}

// nextState waits for the first state event at or after *cur matching
// server and connected.
func (r *recorder) nextState(t *testing.T, cur *int, server string, connected bool) stateEvent {
	t.Helper()
	var found stateEvent
	eventually(t, &r.n, "state event", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := *cur; i < len(r.states); i++ {
			if r.states[i].server == server && r.states[i].connected == connected {
				found, *cur = r.states[i], i+1
				return true
			}
		}
		return false
	})
	return found
}

// testNode is the relay node the tests configure.
func testNode() *corev3.Node {
	return &corev3.Node{Id: "xds-relay-test", Cluster: "xds-relay"}
}

// fastBackoff keeps reconnects quick in tests.
func fastBackoff(int) time.Duration { return 10 * time.Millisecond }

// newClient starts a Client for servers and closes it at cleanup.
func newClient(t *testing.T, mode upstream.Mode, h upstream.Handler, servers ...string) *upstream.Client {
	t.Helper()
	return newClientCfg(t, upstream.Config{Mode: mode}, h, servers...)
}

func newClientCfg(t *testing.T, cfg upstream.Config, h upstream.Handler, servers ...string) *upstream.Client {
	t.Helper()
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, upstream.ServerConfig{URI: s})
	}
	if cfg.Node == nil {
		cfg.Node = testNode()
	}
	if cfg.Backoff == nil {
		cfg.Backoff = fastBackoff
	}
	cfg.Logger = zaptest.NewLogger(t)
	c := upstream.New(cfg, h)
	t.Cleanup(c.Close)
	return c
}

// names returns the resource names of u, in order.
func names(u upstream.Update) []string {
	out := make([]string, 0, len(u.Resources))
	for _, r := range u.Resources {
		out = append(out, r.Name)
	}
	return out
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// waitWatches polls until the cache of typ satisfies check: the server
// records a request before it processes it, so tests that change resources
// right after a subscription change wait for the server's watches first.
func (cp *controlPlane) waitWatches(t *testing.T, typ string, what string, check func(*cachev3.LinearCache) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !check(cp.caches[typ]) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
