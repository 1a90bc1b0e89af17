package integration_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

const fedAuthority = "auth.example"

// fedSetup serves target's resources under xdstp names of auth.example from
// their own upstream, behind a relay whose default upstream is another one;
// it returns both upstreams and the client bootstrap (the listener template
// makes xds:///target an xdstp name).
func fedSetup(t *testing.T, target, nodeID string) (def, auth *xdstest.Upstream, bootstrap []byte) {
	t.Helper()
	def = xdstest.StartUpstream(t)
	auth = xdstest.StartUpstream(t)
	a := xdstest.StartBackend(t, "A")
	prefix := "xdstp://" + fedAuthority + "/envoy.config."
	names := xdstest.GRPCNames{
		Listener:  prefix + "listener.v3.Listener/" + target,
		Route:     prefix + "route.v3.RouteConfiguration/route-" + target,
		Cluster:   prefix + "cluster.v3.Cluster/cluster-" + target,
		Endpoints: prefix + "endpoint.v3.ClusterLoadAssignment/endpoints-" + target,
	}
	auth.SetResources(xdstest.GRPCResourcesNamed(names, a.Addr()))
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), def.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{
			fedAuthority: {XDSServers: []config.Server{{ServerURI: auth.Addr()}}},
		}
	}))
	bootstrap = xdstest.Bootstrap{ServerURI: r.Addr(), NodeID: nodeID, NodeCluster: "integration",
		Authorities:      map[string]string{fedAuthority: r.Addr()},
		ListenerTemplate: prefix + "listener.v3.Listener/%s"}.JSON()
	return def, auth, bootstrap
}

// wantFederated checks that only the authority's upstream was asked for the
// target's listener, and the default upstream for no xdstp name.
func wantFederated(t *testing.T, def, auth *xdstest.Upstream, target string) {
	t.Helper()
	auth.WaitRequest(t, 0, "the xdstp listener at auth.example's upstream", func(r xdstest.Request) bool {
		return r.TypeURL() == resource.ListenerType && slices.ContainsFunc(r.Names(), func(n string) bool {
			return strings.HasPrefix(n, "xdstp://"+fedAuthority+"/") && strings.HasSuffix(n, "/"+target)
		})
	})
	for _, r := range def.Requests() {
		for _, n := range r.Names() {
			if strings.HasPrefix(n, "xdstp://") {
				t.Fatalf("the default upstream was asked for %s", n)
			}
		}
	}
}

// grpc-go with an xdstp listener template completes an RPC through the
// relay; only auth.example's upstream sees those subscriptions.
func TestGRPCGoFederation(t *testing.T) {
	t.Parallel()
	const target = "fed-svc"
	def, auth, bootstrap := fedSetup(t, target, "grpc-go-fed")
	conn := dialXDS(t, bootstrap, target)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "A"); err != nil {
		t.Fatalf("RPC through the federated relay: %v", err)
	}
	wantFederated(t, def, auth, target)
}

// Python grpcio (C-core, GRPC_EXPERIMENTAL_XDS_FEDERATION=true) the same.
func TestPythonFederation(t *testing.T) {
	t.Parallel()
	deb := requirePython(t)
	const target = "py-fed-svc"
	def, auth, bootstrap := fedSetup(t, target, "python-fed")
	if out := runPython(t, deb, bootstrap, target); !strings.Contains(out, "x-backend=A") {
		t.Fatalf("python client output %q, want x-backend=A", out)
	}
	wantFederated(t, def, auth, target)
}
