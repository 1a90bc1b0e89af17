package relay_test

import (
	"net"
	"slices"
	"sync"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// globUpstream is a tiny SotW ADS server that expands xdstp glob collections
// (go-control-plane does not): a CDS request for ".../prefix/*" is answered
// with every cluster under it. It records the CDS names it was asked for.
type globUpstream struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	clusters []string

	mu    sync.Mutex
	asked [][]string
}

func (u *globUpstream) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	var last []string
	nonce := 0
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		names := slices.Sorted(slices.Values(req.GetResourceNames()))
		if req.GetTypeUrl() != resource.ClusterType || slices.Equal(names, last) {
			continue
		}
		last = names
		u.mu.Lock()
		u.asked = append(u.asked, names)
		u.mu.Unlock()
		nonce++
		resp := &discoverygrpc.DiscoveryResponse{TypeUrl: resource.ClusterType, VersionInfo: "1", Nonce: string(rune('a' + nonce))}
		for _, c := range u.clusters {
			cu, err := keying.ParseURN(c)
			if err != nil {
				return err
			}
			match := slices.ContainsFunc(names, func(n string) bool {
				if n == c {
					return true
				}
				g, err := keying.ParseURL(n)
				return err == nil && g.IsGlob() && g.Matches(cu)
			})
			if match {
				a, err := anypb.New(xdstest.EDSCluster(c, "eds"))
				if err != nil {
					return err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

// Glob collections: clients subscribed to ".../blue/*" get every member and
// nothing else, however many share it the relay holds one upstream
// subscription, and a SotW and a Delta client see the same members.
func TestGlobCollections(t *testing.T) {
	const p = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/"
	up := &globUpstream{clusters: []string{p + "blue/a", p + "blue/b", p + "green/c"}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, up)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })

	r := xdstest.StartRelay(t, lis.Addr().String(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))
	for i := range 3 {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: string(rune('a' + i))})
		c.Subscribe(resource.ClusterType, p+"blue/*")
		resp := c.RecvType(resource.ClusterType)
		wantNames(t, resp, p+"blue/a", p+"blue/b")
		c.Ack(resp)
	}
	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	d.Subscribe(resource.ClusterType, []string{p + "blue/*"}, nil)
	wantDelta(t, d.MustRecv(), []string{p + "blue/a", p + "blue/b"}, nil)

	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.asked) != 1 || !slices.Equal(up.asked[0], []string{p + "blue/*"}) {
		t.Fatalf("upstream asked %v, want one glob subscription", up.asked)
	}
}
