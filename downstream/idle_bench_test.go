package downstream

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// idleSource answers every subscription with its type's one View and keeps
// nothing of the streams: the benchmark counts the downstream's memory, not
// the relay's watcher sets.
type idleSource struct{ views map[string]*View }

func (f *idleSource) Bind(Watcher, *corev3.Node) error { return nil }
func (f *idleSource) Cancel(Watcher)                   {}

func (f *idleSource) Watch(w Watcher, typeURL string, c Change) {
	force := append(append([]string(nil), c.Add...), c.Answer...)
	if c.Wildcard != nil && *c.Wildcard {
		force = append(force, keying.Wildcard)
	}
	if v := f.views[typeURL]; v != nil && len(force) > 0 {
		w.Notify(v, force)
	}
}

// scriptStream is an Envoy-like client on the server side of its stream: it
// subscribes to each request of script in turn, ACKs each response, then
// stays idle until ctx ends, as a synced client's stream does.
type scriptStream struct {
	ctx    context.Context
	script []*discoverypb.DiscoveryRequest
	sent   chan *encoded
	synced func()
	ack    *discoverypb.DiscoveryRequest // the request whose response is awaited
}

func (s *scriptStream) SetHeader(metadata.MD) error  { return nil }
func (s *scriptStream) SendHeader(metadata.MD) error { return nil }
func (s *scriptStream) SetTrailer(metadata.MD)       {}
func (s *scriptStream) Context() context.Context     { return s.ctx }
func (s *scriptStream) SendMsg(m any) error          { s.sent <- m.(*encoded); return nil }

// RecvMsg decodes the client's next request into m through the server's
// codec, as grpc would.
func (s *scriptStream) RecvMsg(m any) error {
	var req *discoverypb.DiscoveryRequest
	switch {
	case s.ack != nil:
		resp := &discoverypb.DiscoveryResponse{}
		e := <-s.sent
		if err := proto.Unmarshal(append(append([]byte{}, e.body...), e.nonce...), resp); err != nil {
			return err
		}
		req = &discoverypb.DiscoveryRequest{TypeUrl: s.ack.TypeUrl, ResourceNames: s.ack.ResourceNames,
			VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}
		s.ack = nil
	case len(s.script) > 0:
		req, s.ack, s.script = s.script[0], s.script[0], s.script[1:]
	default:
		// The last ACK was handled: the stream is synced and idle.
		s.script = nil
		s.synced()
		<-s.ctx.Done()
		return io.EOF
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	c := codec{proto: encoding.GetCodecV2(grpcproto.Name)}
	return c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m)
}

// idleViews are the fleet of the streams run of xds-bench: one listener and
// route, 100 clusters and their endpoints.
func idleViews() map[string]*View {
	clusters := make([]string, 100)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("cluster-%d", i)
	}
	return map[string]*View{
		keying.ListenerType: fuzzView(keying.ListenerType, "listener-0"),
		keying.ClusterType:  fuzzView(keying.ClusterType, clusters...),
		keying.RouteType:    fuzzView(keying.RouteType, "route-0"),
		keying.EndpointType: fuzzView(keying.EndpointType, clusters...),
	}
}

// idleScript is an Envoy-like client's subscriptions: LDS and CDS
// wildcards, then its route and the endpoints of every cluster; nodeN
// numbers the node it presents.
func idleScript(nodeN int, clusters []string) []*discoverypb.DiscoveryRequest {
	node := &corev3.Node{Id: fmt.Sprintf("node-%d", nodeN), Cluster: "node", UserAgentName: "xds-loadgen",
		Locality: &corev3.Locality{Region: "region-1", Zone: "zone-a"}}
	return []*discoverypb.DiscoveryRequest{
		{Node: node, TypeUrl: keying.ListenerType},
		{TypeUrl: keying.ClusterType},
		{TypeUrl: keying.RouteType, ResourceNames: []string{"route-0"}},
		{TypeUrl: keying.EndpointType, ResourceNames: clusters},
	}
}

// BenchmarkIdleStreamMemory reports the heap an idle, synced Envoy-like
// SotW ADS stream (four types, 100 endpoint names) keeps in the downstream
// server: its state, what it keeps of its requests, its handler goroutine's
// descriptor and this benchmark's stream stub; not grpc's transport, nor
// goroutine stacks, nor the relay's watcher sets. Its streams present
// their own node each, or one node per ten streams, as the ten streams of
// one connection of xds-bench's streams run do.
func BenchmarkIdleStreamMemory(b *testing.B) {
	for _, perNode := range []int{1, 10} {
		b.Run(fmt.Sprintf("streams-per-node=%d", perNode), func(b *testing.B) { benchIdleStreams(b, perNode) })
	}
}

func benchIdleStreams(b *testing.B, perNode int) {
	const streams = 2000
	views := idleViews()
	clusters := make([]string, 0, 100)
	for i := range 100 {
		clusters = append(clusters, fmt.Sprintf("cluster-%d", i))
	}
	var total uint64
	for b.Loop() {
		srv := NewServer(&idleSource{views: views}, Options{Metrics: metrics.New()})
		ctx, cancel := context.WithCancel(context.Background())
		var synced, done sync.WaitGroup
		before := heapInUse()
		for i := range streams {
			synced.Add(1)
			done.Add(1)
			ss := &scriptStream{ctx: ctx, script: idleScript(i/perNode, clusters), sent: make(chan *encoded, 1),
				synced: synced.Done}
			go func() {
				defer done.Done()
				_ = srv.serve(ss, "", false)
			}()
		}
		synced.Wait()
		total += heapInUse() - before
		cancel()
		done.Wait()
		srv.Close()
	}
	b.ReportMetric(float64(total)/float64(b.N*streams), "heap-B/stream")
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
