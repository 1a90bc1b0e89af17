package relay_test

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// Glob collections: clients subscribed to ".../blue/*" get every member and
// nothing else, however many share it the relay holds one upstream
// subscription, and a SotW and a Delta client see the same members.
func TestGlobCollections(t *testing.T) {
	const p = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/"
	clusters := []string{p + "blue/a", p + "blue/b", p + "green/c"}
	// The upstream expands globs (go-control-plane does not).
	up := &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, c := range clusters {
			cu, err := keying.ParseURN(c)
			if err != nil {
				return nil, err
			}
			if slices.ContainsFunc(names, func(n string) bool {
				g, err := keying.ParseURL(n)
				return n == c || (err == nil && g.IsGlob() && g.Matches(cu))
			}) {
				a, err := anypb.New(xdstest.EDSCluster(c, "eds"))
				if err != nil {
					return nil, err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		return resp, nil
	}}
	addr := startFakeCDS(t, up)

	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
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
