package downstream_test

import (
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
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

// start serves a downstream.Server over src on 127.0.0.1:0 and returns its
// address; everything stops when the test ends.
func start(t *testing.T, src downstream.Source) string {
	t.Helper()
	return startWith(t, src, downstream.Options{})
}

// startWith is start with opts.
func startWith(t *testing.T, src downstream.Source, opts downstream.Options) string {
	t.Helper()
	opts.Metrics = metrics.New()
	srv := downstream.NewServer(src, opts)
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = g.Serve(lis); close(served) }()
	t.Cleanup(func() {
		g.Stop()
		<-served
		srv.Close()
	})
	return lis.Addr().String()
}

// quiet is how long a test watches for a response that must not come.
const quiet = 300 * time.Millisecond

// testNode is the node of the tests' clients.
var testNode = &corev3.Node{Id: "test-node"}

// publishResources is publish with the resources as given (their authority
// and listing too): a name changes when its version or listing does, or
// when it is no longer there.
func (f *fakeSource) publishResources(typeURL string, rs map[string]*downstream.Resource) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.views[typeURL]
	v := &downstream.View{TypeURL: typeURL, Resources: rs, Changed: map[string]struct{}{}, Complete: true, Seq: 1}
	if prev != nil {
		v.Seq = prev.Seq + 1
	}
	for name, r := range rs {
		var old *downstream.Resource
		if prev != nil {
			old = prev.Resources[name]
		}
		if old == nil || old.Version != r.Version || old.Listed != r.Listed {
			v.Changed[name] = struct{}{}
		}
	}
	if prev != nil {
		for name := range prev.Resources {
			if _, ok := rs[name]; !ok {
				v.Changed[name] = struct{}{} // removed
			}
		}
	}
	f.views[typeURL] = v
	for _, w := range f.ws[typeURL] {
		w.Notify(v, nil)
	}
}

// publishView is publishResources of rs unchanged but for unsure: the names
// whose cached copy no live upstream subscription has confirmed
// (View.Unsure). A View that confirms one goes to every watcher, as the
// relay's tellSured does.
func (f *fakeSource) publishView(typeURL string, rs map[string]*downstream.Resource, unsure map[string]struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := &downstream.View{TypeURL: typeURL, Resources: rs, Changed: map[string]struct{}{}, Complete: true, Seq: 1, Unsure: unsure}
	if prev := f.views[typeURL]; prev != nil {
		v.Seq = prev.Seq + 1
	}
	f.views[typeURL] = v
	for _, w := range f.ws[typeURL] {
		w.Notify(v, nil)
	}
}
