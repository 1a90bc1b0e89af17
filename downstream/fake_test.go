package downstream_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// fakeSource is the relay as downstream sees it: one current View per type,
// published to every stream that watches the type. Streams pick what they
// subscribe to; the fake answers a subscription change with the current View
// and the names to force, as Source.Watch says.
type fakeSource struct {
	mu    sync.Mutex
	views map[string]*downstream.View
	ws    map[string]map[uint64]downstream.Watcher // type → watchers
}

func newFakeSource() *fakeSource {
	return &fakeSource{views: map[string]*downstream.View{}, ws: map[string]map[uint64]downstream.Watcher{}}
}

func (f *fakeSource) Bind(downstream.Watcher, *corev3.Node) error { return nil }

func (f *fakeSource) Watch(w downstream.Watcher, typeURL string, c downstream.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ws[typeURL] == nil {
		f.ws[typeURL] = map[uint64]downstream.Watcher{}
	}
	f.ws[typeURL][w.ID()] = w
	force := append(append([]string(nil), c.Add...), c.Answer...)
	if c.Wildcard != nil && *c.Wildcard {
		force = append(force, keying.Wildcard)
	}
	if v := f.views[typeURL]; v != nil && len(force) > 0 {
		w.Notify(v, force)
	}
}

func (f *fakeSource) Cancel(w downstream.Watcher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ws := range f.ws {
		delete(ws, w.ID())
	}
}

// publish makes resources (name → content) the type's current View and
// tells every watcher of the type. Names of the previous View missing from
// it are removed upstream.
func (f *fakeSource) publish(typeURL string, resources map[string]string) *downstream.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.views[typeURL]
	v := &downstream.View{TypeURL: typeURL, Resources: map[string]*downstream.Resource{}, Changed: map[string]struct{}{},
		Absent: map[string]struct{}{}, Complete: true, Seq: 1}
	if prev != nil {
		v.Seq = prev.Seq + 1
	}
	for name, content := range resources {
		r := resource(name, content)
		v.Resources[name] = r
		if prev == nil || prev.Resources[name] == nil || prev.Resources[name].Version != r.Version {
			v.Changed[name] = struct{}{}
		}
	}
	if prev != nil {
		for name := range prev.Resources {
			if _, ok := resources[name]; !ok {
				v.Changed[name] = struct{}{}
				v.Absent[name] = struct{}{}
			}
		}
	}
	f.views[typeURL] = v
	for _, w := range f.ws[typeURL] {
		w.Notify(v, nil)
	}
	return v
}

// resource returns the resource name with content as its body.
func resource(name, content string) *downstream.Resource {
	a, err := anypb.New(wrapperspb.String(content))
	if err != nil {
		panic(err)
	}
	b, err := proto.Marshal(a)
	if err != nil {
		panic(err)
	}
	return &downstream.Resource{Name: name, Version: downstream.ResourceVersion(b), Any: b}
}

// start serves a downstream.Server over src on 127.0.0.1:0 and returns a
// client connection to it; everything stops when the test ends.
func start(t *testing.T, src downstream.Source) *grpc.ClientConn {
	t.Helper()
	srv := downstream.NewServer(src, downstream.Options{Metrics: metrics.New()})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = g.Serve(lis); close(served) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
		srv.Close()
	})
	return conn
}

// wait is how long a test waits for a response; quiet is how long it
// watches for one that must not come.
const (
	wait  = 10 * time.Second
	quiet = 300 * time.Millisecond
)

// responses reads every message of a client stream into a channel until
// the stream ends.
func responses[M any](ctx context.Context, recv func() (M, error)) <-chan M {
	ch := make(chan M)
	go func() {
		defer close(ch)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// sotwClient is a State-of-the-World ADS client.
type sotwClient struct {
	t    *testing.T
	s    discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resp <-chan *discoverypb.DiscoveryResponse
}

func newSotWClient(t *testing.T, conn *grpc.ClientConn) *sotwClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sotwClient{t: t, s: s, resp: responses(ctx, s.Recv)}
}

func (c *sotwClient) send(req *discoverypb.DiscoveryRequest) {
	c.t.Helper()
	if req.Node == nil {
		req.Node = &corev3.Node{Id: "test-node"}
	}
	if err := c.s.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

// recv returns the next response.
func (c *sotwClient) recv() *discoverypb.DiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resp:
		if !ok {
			c.t.Fatal("the stream ended")
		}
		return r
	case <-time.After(wait):
		c.t.Fatal("no response")
	}
	return nil
}

// none fails the test if a response comes within quiet.
func (c *sotwClient) none(why string) {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("%s: got a response with %d resources, version %q", why, len(r.GetResources()), r.GetVersionInfo())
	case <-time.After(quiet):
	}
}

// deltaClient is an incremental ADS client.
type deltaClient struct {
	t    *testing.T
	s    discoverypb.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	resp <-chan *discoverypb.DeltaDiscoveryResponse
}

func newDeltaClient(t *testing.T, conn *grpc.ClientConn) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, s: s, resp: responses(ctx, s.Recv)}
}

func (c *deltaClient) send(req *discoverypb.DeltaDiscoveryRequest) {
	c.t.Helper()
	if req.Node == nil {
		req.Node = &corev3.Node{Id: "test-node"}
	}
	if err := c.s.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deltaClient) recv() *discoverypb.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resp:
		if !ok {
			c.t.Fatal("the stream ended")
		}
		return r
	case <-time.After(wait):
		c.t.Fatal("no response")
	}
	return nil
}

func (c *deltaClient) none(why string) {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("%s: got a response with %d resources and removals %v", why, len(r.GetResources()), r.GetRemovedResources())
	case <-time.After(quiet):
	}
}

// ack acknowledges r.
func (c *deltaClient) ack(r *discoverypb.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}
