package relay_test

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// tp3Upstream is a tiny SotW ADS server that answers CDS requests with the
// clusters it has and TP3 resource_errors for the names in errs (go-control-
// plane does not send resource_errors). It answers a request only when its
// names differ from the last ones answered, so ACKs cause nothing.
type tp3Upstream struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	errs map[string]codes.Code
}

func (u *tp3Upstream) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
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
		nonce++
		resp := &discoverygrpc.DiscoveryResponse{TypeUrl: resource.ClusterType, VersionInfo: "1", Nonce: string(rune('a' + nonce))}
		for _, n := range names {
			if code, bad := u.errs[n]; bad {
				resp.ResourceErrors = append(resp.ResourceErrors, &discoverygrpc.ResourceError{
					ResourceName: &discoverygrpc.ResourceName{Name: n},
					ErrorDetail:  &status.Status{Code: int32(code), Message: "upstream says " + code.String()}})
				continue
			}
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

func startTP3Upstream(t *testing.T, errs map[string]codes.Code) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, &tp3Upstream{errs: errs})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return lis.Addr().String()
}

func errorsByName(resp *discoverygrpc.DiscoveryResponse) map[string]codes.Code {
	out := map[string]codes.Code{}
	for _, e := range resp.GetResourceErrors() {
		out[e.GetResourceName().GetName()] = codes.Code(e.GetErrorDetail().GetCode())
	}
	return out
}

// TP3: the upstream's resource_errors reach clients, the LDS/CDS full state
// still carries every other resource, and a later subscriber gets the cached
// errors replayed at once.
func TestUpstreamResourceErrorsReplayed(t *testing.T) {
	addr := startTP3Upstream(t, map[string]codes.Code{"gone": codes.NotFound, "flaky": codes.Unavailable})
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, "ok", "gone", "flaky")
	resp := a.RecvType(resource.ClusterType)
	for len(resp.GetResources()) == 0 || len(resp.GetResourceErrors()) < 2 {
		a.Ack(resp)
		resp = a.RecvType(resource.ClusterType)
	}
	wantNames(t, resp, "ok")
	if got := errorsByName(resp); got["gone"] != codes.NotFound || got["flaky"] != codes.Unavailable {
		t.Fatalf("resource_errors %v", got)
	}

	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
	late.Subscribe(resource.ClusterType, "gone", "flaky")
	if got := errorsByName(late.RecvType(resource.ClusterType)); got["gone"] != codes.NotFound || got["flaky"] != codes.Unavailable {
		t.Fatalf("replayed resource_errors %v", got)
	}
}

// With no upstream reachable and nothing cached, a subscriber gets a TP3
// UNAVAILABLE error before its own does-not-exist timer fires.
func TestUnavailableWhenNoUpstream(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	r := xdstest.StartRelay(t, dead, xdstest.WithConfig(func(c *config.Config) { c.Upstream.UnavailableAfter = 200 * time.Millisecond }))
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.EndpointType, "e1")
	if got := errorsByName(c.RecvType(resource.EndpointType)); got["e1"] != codes.Unavailable {
		t.Fatalf("resource_errors %v, want UNAVAILABLE for e1", got)
	}
}
