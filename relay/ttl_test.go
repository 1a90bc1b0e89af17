package relay_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

var ttlFeatures = []string{"xds.config.supports-resource-ttl", "xds.config.supports-resource-in-sotw"}

// sotwItem is one resource of a SotW response: its name, and whether it
// came wrapped in a Resource with a TTL or as a heartbeat (no body).
type sotwItem struct {
	name      string
	ttl       time.Duration
	heartbeat bool
}

func sotwItems(t *testing.T, resp *discoverygrpc.DiscoveryResponse) []sotwItem {
	t.Helper()
	var out []sotwItem
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != keying.ResourceWrapperType {
			out = append(out, sotwItem{name: anyNames(&discoverygrpc.DiscoveryResponse{Resources: []*anypb.Any{a}})[0]})
			continue
		}
		w := &discoverygrpc.Resource{}
		if err := proto.Unmarshal(a.GetValue(), w); err != nil {
			t.Fatal(err)
		}
		out = append(out, sotwItem{name: w.GetName(), ttl: w.GetTtl().AsDuration(), heartbeat: w.GetResource() == nil})
	}
	slices.SortFunc(out, func(a, b sotwItem) int { return strings.Compare(a.name, b.name) })
	return out
}

// xDS TTL: resources the upstream gives a TTL reach the clients that support
// TTLs with it, and so do its heartbeats; clients that do not get plain
// resources. When the upstream goes silent the TTL passes: the relay removes
// the resource and tells every client.
func TestTTLPassedThroughAndExpired(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	up := xdstest.StartUpstream(t, xdstest.WithHeartbeat(100*time.Millisecond))
	up.SetResourcesTTL(clusters("p", "t"), map[string]time.Duration{"t": ttl})
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw" // go-control-plane's TTLs are SotW only
	}))

	sotw := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw", ClientFeatures: ttlFeatures})
	sotw.Subscribe(resource.ClusterType, "*")
	first := sotw.RecvType(resource.ClusterType)
	sotw.Ack(first)
	if got, want := sotwItems(t, first), []sotwItem{{name: "p"}, {name: "t", ttl: ttl}}; !slices.Equal(got, want) {
		t.Fatalf("first response %+v, want %+v", got, want)
	}
	beat := sotw.RecvType(resource.ClusterType)
	sotw.Ack(beat)
	if got, want := sotwItems(t, beat), []sotwItem{{name: "t", ttl: ttl, heartbeat: true}}; !slices.Equal(got, want) ||
		beat.GetVersionInfo() != first.GetVersionInfo() {
		t.Fatalf("heartbeat response %+v version %s, want %+v at %s", got, beat.GetVersionInfo(), want, first.GetVersionInfo())
	}

	delta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta", ClientFeatures: ttlFeatures[:1]})
	delta.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := delta.MustRecv()
	delta.Ack(resp)
	version := map[string]string{}
	for _, res := range resp.GetResources() {
		version[res.GetName()] = res.GetVersion()
		if want := map[string]time.Duration{"t": ttl}[res.GetName()]; res.GetTtl().AsDuration() != want {
			t.Fatalf("delta %s ttl %v, want %v", res.GetName(), res.GetTtl().AsDuration(), want)
		}
	}
	resp = delta.MustRecv()
	delta.Ack(resp)
	if rs := resp.GetResources(); len(rs) != 1 || rs[0].GetName() != "t" || rs[0].GetResource() != nil ||
		rs[0].GetVersion() != version["t"] || rs[0].GetTtl().AsDuration() != ttl {
		t.Fatalf("delta heartbeat %v", resp)
	}

	plain := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "plain"})
	plain.Subscribe(resource.ClusterType, "*")
	if got, want := sotwItems(t, plain.RecvType(resource.ClusterType)), []sotwItem{{name: "p"}, {name: "t"}}; !slices.Equal(got, want) {
		t.Fatalf("a client without TTL support got %+v, want %+v", got, want)
	}
	plain.ExpectNoResponse(quiet) // no heartbeats

	// The upstream goes silent: t expires, p stays.
	up.Stop()
	wantNames(t, plain.RecvType(resource.ClusterType), "p")
	for {
		resp := delta.MustRecv()
		if slices.Equal(resp.GetRemovedResources(), []string{"t"}) {
			break
		}
	}
	for {
		resp := sotw.RecvType(resource.ClusterType)
		if names := anyNames(resp); len(names) == 1 && names[0] == "p" {
			break
		}
	}
	if got := cachedNames(r, resource.ClusterType); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("cache after the TTL passed: %v", got)
	}
}
