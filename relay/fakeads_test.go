package relay_test

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
)

// fakeCDS is a tiny SotW ADS upstream for what go-control-plane cannot do
// (TP3 resource_errors, glob collections): answer builds the CDS response to
// a subscription. It answers only when the subscribed names change, so ACKs
// cause nothing, and records the name lists it was asked for.
type fakeCDS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	answer func(names []string) (*discoverygrpc.DiscoveryResponse, error)

	mu    sync.Mutex
	asked [][]string
}

func (f *fakeCDS) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	var last []string
	for nonce := 1; ; {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		names := slices.Sorted(slices.Values(req.GetResourceNames()))
		if req.GetTypeUrl() != resource.ClusterType || slices.Equal(names, last) {
			continue
		}
		last = names
		f.mu.Lock()
		f.asked = append(f.asked, names)
		f.mu.Unlock()
		resp, err := f.answer(names)
		if err != nil {
			return err
		}
		resp.TypeUrl, resp.VersionInfo, resp.Nonce = resource.ClusterType, "1", strconv.Itoa(nonce)
		nonce++
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

// startFakeCDS serves f on 127.0.0.1:0 until the test ends.
func startFakeCDS(t *testing.T, f *fakeCDS) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, f)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return lis.Addr().String()
}
