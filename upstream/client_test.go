package upstream_test

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/upstream"
)

// startControlPlane starts a go-control-plane upstream that sets and deletes
// resources one at a time. With sotwOnly, it answers Delta streams with
// codes.Unimplemented.
func startControlPlane(t *testing.T, sotwOnly bool) *xdstest.Upstream {
	t.Helper()
	if sotwOnly {
		return xdstest.StartUpstream(t, xdstest.Linear(), xdstest.SotWOnly())
	}
	return xdstest.StartUpstream(t, xdstest.Linear())
}

// testNode is the relay node the tests configure.
func testNode() *corev3.Node {
	return &corev3.Node{Id: "xds-relay-test", Cluster: "xds-relay"}
}

// fastBackoff keeps reconnects quick in tests.
func fastBackoff(int) time.Duration { return 10 * time.Millisecond }

// newClient starts a Client for servers and closes it at cleanup.
func newClient(t *testing.T, mode upstream.Mode, h upstream.Handler, servers ...string) *upstream.Client {
	t.Helper()
	return newClientCfg(t, upstream.Config{Mode: mode}, h, servers...)
}

func newClientCfg(t *testing.T, cfg upstream.Config, h upstream.Handler, servers ...string) *upstream.Client {
	t.Helper()
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, upstream.ServerConfig{URI: s})
	}
	if cfg.Node == nil {
		cfg.Node = testNode()
	}
	if cfg.Backoff == nil {
		cfg.Backoff = fastBackoff
	}
	cfg.Logger = zaptest.NewLogger(t)
	c := upstream.New(cfg, h)
	t.Cleanup(c.Close)
	return c
}

// names returns the resource names of u, in order.
func names(u upstream.Update) []string {
	out := make([]string, 0, len(u.Resources))
	for _, r := range u.Resources {
		out = append(out, r.Name)
	}
	return out
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func cluster(name string) *clusterv3.Cluster { return &clusterv3.Cluster{Name: name} }

func listener(name string) *listenerv3.Listener { return &listenerv3.Listener{Name: name} }

func endpoints(name string) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name}
}
