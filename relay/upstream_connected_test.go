package relay_test

import (
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// xds_relay_upstream_connected counts the streams of every scope kind to a
// server instead of letting the scopes overwrite one sample (the last
// writer won before): two node groups and two nodes' secret scopes on the
// same server are 2 and 2, beside the shared scope's 1; a group released
// after its linger leaves the sum.
func TestUpstreamConnectedSumsScopes(t *testing.T) {
	up := xdstest.StartUpstream(t, xdstest.KeyByCluster())
	withSecret := func(cluster string) xdstest.Resources {
		res := clusters("c-" + cluster)
		res[resource.SecretType] = []types.Resource{&tlsv3.Secret{Name: "s1",
			Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
				Secret: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: cluster}}}}}}
		return res
	}
	up.SetSnapshot("blue", withSecret("blue"))
	up.SetSnapshot("green", withSecret("green"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: true} // plaintext test
		c.Upstream.Linger = 50 * time.Millisecond
	}))
	connected := func(scope string) float64 {
		return metricValue(t, r.Relay, "xds_relay_upstream_connected",
			map[string]string{"authority": "", "server": up.Addr(), "scope": scope})
	}
	wantConnected := func(shared, group, node float64) {
		t.Helper()
		xdstest.Eventually(t, func() bool {
			return connected("shared") == shared && connected("group") == group && connected("node") == node
		}, fmt.Sprintf("upstream_connected shared %v, group %v, node %v", shared, group, node), func() any {
			return fmt.Sprintf("shared %v, group %v, node %v", connected("shared"), connected("group"), connected("node"))
		})
	}

	var blue *xdstest.ADSClient
	for _, n := range []*core.Node{{Id: "b1", Cluster: "blue"}, {Id: "g1", Cluster: "green"}} {
		c := xdstest.DialADS(t, r.Addr(), n)
		c.Subscribe(resource.ClusterType, "*")
		wantNames(t, c.RecvType(resource.ClusterType), "c-"+n.GetCluster())
		c.Subscribe(resource.SecretType, "s1")
		wantNames(t, c.RecvType(resource.SecretType), "s1")
		if n.GetCluster() == "blue" {
			blue = c
		}
	}
	wantConnected(1, 2, 2)

	blue.Close() // its group and its node's secret scope go after the linger
	wantConnected(1, 1, 1)
}

// An authority with servers of its own that it cannot reach is present in
// xds_relay_upstream_connected as 0 once a client asks for one of its names
// (its client is dialled then), not absent until a first connect: the alert
// on an authority without a connected server can fire. It turns 1 once the
// server is reachable.
func TestUpstreamConnectedAuthorityNeverConnected(t *testing.T) {
	up := xdstest.StartUpstream(t)
	auth := xdstest.StartUpstream(t)
	name := "xdstp://auth.example/envoy.config.cluster.v3.Cluster/c1"
	auth.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster(name, "e1")}})
	auth.Stop()
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {XDSServers: []config.Server{{ServerURI: auth.Addr()}}}}
	}))
	labels := map[string]string{"authority": "auth.example", "scope": "shared", "server": auth.Addr()}
	if got := metricValue(t, r.Relay, "xds_relay_upstream_connected", labels); got != -1 {
		t.Fatalf("auth.example's sample before any client asked for it = %v, want none (its client is idle)", got)
	}
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, name)
	xdstest.Eventually(t, func() bool { return metricValue(t, r.Relay, "xds_relay_upstream_connected", labels) == 0 },
		"auth.example present as 0 while unreachable", func() any {
			return metricValue(t, r.Relay, "xds_relay_upstream_connected", labels)
		})
	auth.Restart()
	wantNames(t, c.RecvType(resource.ClusterType), name)
	xdstest.Eventually(t, func() bool { return metricValue(t, r.Relay, "xds_relay_upstream_connected", labels) == 1 },
		"auth.example connected", nil)
}
