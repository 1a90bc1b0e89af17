package relay_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// keying.group_by: a control plane that tailors config per node cluster gets
// one stream per group, presenting the group's cluster; clients of a group
// share it and get their group's config.
func TestGroupByCluster(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	up.SetSnapshot("blue", clusters("c-blue"))
	up.SetSnapshot("green", clusters("c-green"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
	}))

	for _, tc := range []struct{ id, cluster, want string }{
		{"b1", "blue", "c-blue"}, {"b2", "blue", "c-blue"}, {"g1", "green", "c-green"},
	} {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: tc.id, Cluster: tc.cluster})
		c.Subscribe(resource.ClusterType, "*")
		wantNames(t, c.RecvType(resource.ClusterType), tc.want)
	}
	// One stream per group, and the shared scope's: the relay keeps it open
	// from the start (with nothing subscribed here) to know that the
	// upstream is reachable. It dials on its own, so on a busy machine it
	// may come after the groups' answers: wait for it, then count.
	xdstest.Eventually(t, func() bool { return up.Stats().TotalStreams >= 2+1 }, "the shared scope's stream and the groups'",
		func() any { return up.Stats().TotalStreams })
	if n := up.Stats().TotalStreams; n != 2+1 {
		t.Fatalf("upstream saw %d streams, want one per group and the shared one", n)
	}
	var ids []string
	for _, req := range up.Requests() {
		if !slices.Contains(ids, req.Node.GetId()) {
			ids = append(ids, req.Node.GetId())
		}
	}
	slices.Sort(ids)
	if want := []string{"xds-relay-test/cluster=blue", "xds-relay-test/cluster=green"}; !slices.Equal(ids, want) {
		t.Fatalf("upstream nodes %v, want %v", ids, want)
	}
}

// Contract: secrets are keyed per client node id — the upstream sees the
// client's own node and a secret is never served to another node; a node's
// secret stream ends with its last client.
func TestSecretsNotShared(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.WithNodeHash(func(n *core.Node) string { return n.GetId() }))
	secret := func(v string) xdstest.Resources {
		return xdstest.Resources{resource.SecretType: []types.Resource{&tlsv3.Secret{Name: "s1",
			Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
				Secret: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: v}}}}}}}
	}
	up.SetSnapshot("a", secret("for-a"))
	up.SetSnapshot("b", secret("for-b"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: true} // plaintext test
	}))

	got := map[string]string{}
	var clients []*xdstest.ADSClient
	for _, id := range []string{"a", "b"} {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: id})
		c.Subscribe(resource.SecretType, "s1")
		resp := c.RecvType(resource.SecretType)
		s := &tlsv3.Secret{}
		if err := resp.GetResources()[0].UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		got[id] = s.GetGenericSecret().GetSecret().GetInlineString()
		clients = append(clients, c)
	}
	if got["a"] != "for-a" || got["b"] != "for-b" {
		t.Fatalf("secrets served %v: a node got another's secret", got)
	}
	for _, req := range up.Requests() {
		if req.TypeURL() == resource.SecretType && req.Node.GetId() != "a" && req.Node.GetId() != "b" {
			t.Fatalf("secret requested upstream as node %q, want the client's own", req.Node.GetId())
		}
	}
	clients[0].Close()
	up.WaitStreams(t, 1+1) // a's secret stream is gone with a; b's and the shared one stay
}

// keying.group_by in any order: one group is one scope and one upstream
// stream, whatever the order of the fields in the config (a sort in place
// once made the second client of a group open a second stream).
func TestGroupByFieldOrder(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	up.SetSnapshot("blue", clusters("c-blue"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"metadata.env", "cluster"}}
	}))
	node := func(id string) *core.Node {
		n := &core.Node{Id: id, Cluster: "blue"}
		n.Metadata, _ = structpb.NewStruct(map[string]any{"env": "prod"})
		return n
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		c := xdstest.DialADS(t, r.Addr(), node(id))
		c.Subscribe(resource.ClusterType, "*")
		wantNames(t, c.RecvType(resource.ClusterType), "c-blue")
	}
	streams := map[int64]bool{}
	for _, req := range up.Requests() {
		if strings.HasPrefix(req.Node.GetId(), "xds-relay-test/") {
			streams[req.StreamID] = true
		}
	}
	if len(streams) != 1 {
		t.Fatalf("upstream saw %d streams for one group, want 1", len(streams))
	}
	if got := fmt.Sprint(r.Config().Keying.GroupBy); got != "[metadata.env cluster]" {
		t.Fatalf("the config's group_by was changed to %v", got)
	}
}

// A node group's scope and its upstream stream are released a linger after
// its last client left; a returning client gets a new one.
func TestGroupScopeReleased(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	up.SetSnapshot("blue", clusters("c-blue"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
		c.Upstream.Linger = 50 * time.Millisecond
	}))
	before := len(r.DebugUpstreams())
	up.WaitStreams(t, 1) // the shared scope's, dialled at start
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b1", Cluster: "blue"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c-blue")
	if len(r.DebugUpstreams()) == before {
		t.Fatal("the group has no upstream client")
	}
	c.Close()
	up.WaitStreams(t, 1) // the group's is gone
	xdstest.Eventually(t, func() bool { return len(r.DebugUpstreams()) == before }, "the group's scope released", nil)

	c = xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b2", Cluster: "blue"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c-blue")
}
