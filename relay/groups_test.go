package relay_test

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

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
	// upstream is reachable.
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
