package relay_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// scriptedADS is a SotW ADS upstream whose every response the test writes:
// what go-control-plane cannot be made to do on cue, such as a push that
// crosses the relay's newer request on the wire.
type scriptedADS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	streams chan *scriptedStream
}

// scriptedStream is one ADS stream of a scriptedADS.
type scriptedStream struct {
	tb   testing.TB
	ss   discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	reqs chan *discoverygrpc.DiscoveryRequest

	mu    sync.Mutex
	nonce int
}

// startScripted serves a scriptedADS on 127.0.0.1:0 until the test ends.
func startScripted(t *testing.T) (*scriptedADS, string) {
	t.Helper()
	f := &scriptedADS{streams: make(chan *scriptedStream, 8)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return f, lis.Addr().String()
}

func (f *scriptedADS) StreamAggregatedResources(ss discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s := &scriptedStream{ss: ss, reqs: make(chan *discoverygrpc.DiscoveryRequest, 256)}
	f.streams <- s
	for {
		req, err := ss.Recv()
		if err != nil {
			close(s.reqs)
			return nil
		}
		s.reqs <- req
	}
}

// stream waits for the relay's next stream.
func (f *scriptedADS) stream(t *testing.T) *scriptedStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	select {
	case s := <-f.streams:
		s.tb = t
		return s
	case <-ctx.Done():
		t.Fatal("scripted upstream: no stream")
		return nil
	}
}

// next waits for the relay's next request of typeURL, skipping others.
func (s *scriptedStream) next(typeURL string) *discoverygrpc.DiscoveryRequest {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	for {
		select {
		case req, ok := <-s.reqs:
			if !ok {
				s.tb.Fatal("scripted upstream: stream ended")
			}
			if req.GetTypeUrl() == typeURL {
				return req
			}
		case <-ctx.Done():
			s.tb.Fatalf("scripted upstream: no %s request", typeURL)
		}
	}
}

// send sends a response of typeURL at version holding rs and returns its nonce.
func (s *scriptedStream) send(typeURL, version string, rs ...proto.Message) string {
	s.tb.Helper()
	s.mu.Lock()
	s.nonce++
	nonce := strconv.Itoa(s.nonce)
	s.mu.Unlock()
	resp := &discoverygrpc.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Nonce: nonce}
	for _, r := range rs {
		a, err := anypb.New(r)
		if err != nil {
			s.tb.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	if err := s.ss.Send(resp); err != nil {
		s.tb.Fatalf("scripted upstream: send: %v", err)
	}
	return nonce
}

// nextNames waits for the relay's next request of typeURL that subscribes
// exactly names (in any order), skipping the others (ACKs of older
// subscriptions).
func (s *scriptedStream) nextNames(typeURL string, names ...string) *discoverygrpc.DiscoveryRequest {
	s.tb.Helper()
	want := slices.Sorted(slices.Values(names))
	for {
		req := s.next(typeURL)
		if slices.Equal(slices.Sorted(slices.Values(req.GetResourceNames())), want) {
			return req
		}
	}
}
