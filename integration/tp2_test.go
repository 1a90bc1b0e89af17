package integration_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

func envIs(value string) *discoverygrpc.DynamicParameterConstraints {
	return keying.ValueConstraint("env", value)
}

// xRFC TP2 with real grpc-go and Python (C-core) clients, which cannot send locators: the relay
// turns their node metadata into dynamic parameters
// (keying.dynamic_parameters_from_node). The upstream serves the endpoints of
// one service as two variants, env=prod → backend A and env=test → backend B
// (the listener, route and cluster have no variants: TP2 is not viral). A
// client of each environment, through the same relay, reaches its backend.
func TestTP2ParametersFromNodeRealClients(t *testing.T) {
	t.Parallel()
	const target = "tp2-svc"
	n := xdstest.NamesFor(target)
	a, b := xdstest.StartBackend(t, "A"), xdstest.StartBackend(t, "B")
	up := xdstest.StartTP2(t)
	up.Set(resource.ListenerType, n.Listener, nil, xdstest.GRPCListener(n.Listener, n.Route))
	up.Set(resource.RouteType, n.Route, nil, xdstest.GRPCRoute(n.Route, n.Cluster))
	up.Set(resource.ClusterType, n.Cluster, nil, xdstest.EDSCluster(n.Cluster, n.Endpoints))
	up.Set(resource.EndpointType, n.Endpoints, envIs("prod"), xdstest.Endpoints(n.Endpoints, a.Addr()))
	up.Set(resource.EndpointType, n.Endpoints, envIs("test"), xdstest.Endpoints(n.Endpoints, b.Addr()))
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{DynamicParametersFromNode: map[string]string{"env": "metadata.env"}}
	}))

	for env, backend := range map[string]string{"prod": "A", "test": "B"} {
		bootstrap := xdstest.Bootstrap{ServerURI: r.Addr(), NodeID: "grpc-go-" + env, NodeCluster: "integration",
			NodeMetadata: map[string]any{"env": env}}.JSON()
		conn := dialXDS(t, bootstrap, target)
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
		err := callUntil(ctx, conn, backend)
		cancel()
		if err != nil {
			t.Fatalf("env=%s client: %v", env, err)
		}
	}
	// One upstream subscription per (name, parameter set).
	want := []string{n.Endpoints + "{env=prod}", n.Endpoints + "{env=test}"}
	if got := up.Subscriptions(resource.EndpointType); !slices.Equal(got, want) {
		t.Fatalf("upstream EDS subscriptions %v, want %v", got, want)
	}

	// Python grpcio (C-core) in env=test, answered from the relay's cache.
	deb := requirePython(t)
	bootstrap := xdstest.Bootstrap{ServerURI: r.Addr(), NodeID: "python-test", NodeCluster: "integration",
		NodeMetadata: map[string]any{"env": "test"}}.JSON()
	if out := runPython(t, deb, bootstrap, target); !strings.Contains(out, "x-backend=B") {
		t.Fatalf("python client output %q, want x-backend=B", out)
	}
	if got := up.Subscriptions(resource.EndpointType); !slices.Equal(got, want) {
		t.Fatalf("upstream EDS subscriptions after the Python client %v, want %v", got, want)
	}
}
