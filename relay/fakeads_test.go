package relay_test

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/keying"
)

// fakeCDS is a tiny SotW ADS upstream for what go-control-plane cannot do
// (TP3 resource_errors, glob collections): answer builds the CDS response to
// a subscription. It answers only when the subscribed names change, so ACKs
// cause nothing, and records the name lists it was asked for.
type fakeCDS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	answer func(names []string) (*discoverygrpc.DiscoveryResponse, error)
	// answerNode, when set instead of answer, also gets the stream's node.
	answerNode func(node *core.Node, names []string) (*discoverygrpc.DiscoveryResponse, error)

	mu    sync.Mutex
	asked [][]string
	nodes []string // the node id of every request that changed names
}

func (f *fakeCDS) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	var last []string
	asked := false // the wildcard's names are empty too
	var node *core.Node
	for nonce := 1; ; {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		if node == nil {
			node = req.GetNode()
		}
		names := slices.Clone(req.GetResourceNames())
		for _, l := range req.GetResourceLocators() { // TP2 locators as "name{k=v&…}"
			names = append(names, l.GetName()+"{"+keying.CanonicalParams(l.GetDynamicParameters())+"}")
		}
		slices.Sort(names)
		if req.GetTypeUrl() != resource.ClusterType || (asked && slices.Equal(names, last)) {
			continue
		}
		last, asked = names, true
		f.mu.Lock()
		f.asked = append(f.asked, names)
		f.nodes = append(f.nodes, node.GetId())
		f.mu.Unlock()
		var resp *discoverygrpc.DiscoveryResponse
		if f.answerNode != nil {
			resp, err = f.answerNode(node, names)
		} else {
			resp, err = f.answer(names)
		}
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
