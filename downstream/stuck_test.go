package downstream

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// hubSource serves one type's View to every stream and tells them all of
// each new one, as the relay does.
type hubSource struct {
	mu sync.Mutex
	v  *View
	ws map[uint64]Watcher
}

func (h *hubSource) Bind(Watcher, *corev3.Node) error { return nil }
func (h *hubSource) Cancel(w Watcher) {
	h.mu.Lock()
	delete(h.ws, w.ID())
	h.mu.Unlock()
}
func (h *hubSource) Watch(w Watcher, _ string, c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ws[w.ID()] = w
	if c.Wildcard != nil && *c.Wildcard {
		w.Notify(h.v, []string{keying.Wildcard})
	}
}

func (h *hubSource) publish(v *View) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.v = v
	for _, w := range h.ws {
		w.Notify(v, nil)
	}
}

// bigCDS is a CDS View of 200 resources (~45 KB a response) at generation
// gen: the resource "gen" changes with it.
func bigCDS(gen int) *View {
	v := &View{TypeURL: keying.ClusterType, Seq: uint64(gen + 1), Resources: map[string]*Resource{}, Complete: true,
		Changed: map[string]struct{}{"gen": {}}}
	add := func(name, value string) {
		a, _ := anypb.New(wrapperspb.String(value))
		b, _ := proto.Marshal(a)
		v.Resources[name] = &Resource{Name: name, Version: ResourceVersion(b), Any: b}
	}
	for i := range 200 {
		add(fmt.Sprintf("c%03d", i), strings.Repeat("x", 200))
	}
	add("gen", fmt.Sprint(gen))
	return v
}

// Clients that stopped reading never hold the senders: with more such
// clients than sender goroutines, every change still reaches a healthy
// client. (A stream sends only what its client has acknowledged but a
// little of, so no send blocks on a full transport.)
func TestStuckClientsHoldNoSender(t *testing.T) {
	src := &hubSource{v: bigCDS(0), ws: map[uint64]Watcher{}}
	srv := NewServer(src, Options{Metrics: metrics.New(), MaxSenders: 2})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(id string, window int32) discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if window > 0 { // a client that does not read: small windows fill at once
			opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
		}
		conn, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		s, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: keying.ClusterType,
			ResourceNames: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 10 { // five times the senders
		open(fmt.Sprintf("stuck-%d", i), 64<<10)
	}
	healthy := open("healthy", 0)
	recv := func() *discoverypb.DiscoveryResponse {
		t.Helper()
		resp, err := healthy.Recv()
		if err != nil {
			t.Fatalf("healthy client: %v", err)
		}
		if err := healthy.Send(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	genOf := func(resp *discoverypb.DiscoveryResponse) string {
		for _, a := range resp.GetResources() {
			var s wrapperspb.StringValue
			if err := a.UnmarshalTo(&s); err == nil && !strings.HasPrefix(s.Value, "x") {
				return s.Value
			}
		}
		return ""
	}
	recv()
	for gen := 1; gen <= 10; gen++ {
		src.publish(bigCDS(gen))
		for genOf(recv()) != fmt.Sprint(gen) { // the latest state, coalesced or not
		}
	}
	// Each stuck stream has changes to send and waits for its client.
	if got := testutil.ToFloat64(srv.m.StreamsWaiting); got != 10 {
		t.Errorf("xds_relay_downstream_streams_waiting = %v, want the 10 stuck streams", got)
	}
}
