package gateway_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is how long a test waits to prove that nothing arrives.
const quiet = 300 * time.Millisecond

// spec is the configuration every test cluster starts from.
var spec = gatewaycp.Spec{Listeners: 2, Routes: 4, Backends: 3, EndpointsPerBackend: 2, Secrets: 1}

// env is a gateway control plane and a relay in front of it.
type env struct {
	cp    *gatewaycp.Server
	fleet *gatewaycp.Fleet
	relay *xdstest.Relay
}

// start starts a control plane and a relay; secrets are allowed over
// plaintext unless an option says otherwise.
func start(t *testing.T, opts ...xdstest.RelayOption) *env {
	t.Helper()
	cp, err := gatewaycp.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	opts = append([]xdstest.RelayOption{xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: true}
		c.Upstream.Linger = 200 * time.Millisecond
	})}, opts...)
	return &env{cp: cp, fleet: gatewaycp.NewFleet(spec), relay: xdstest.StartRelay(t, cp.Addr(), opts...)}
}

// publish sets cluster's snapshot at the control plane (the fleet's current
// one, or churned by n routes) and returns it with its version.
func (e *env) publish(cluster string, churn int) (*controlv1.ConfigSnapshot, string) {
	snap := e.fleet.Snapshot(cluster, time.Now())
	if churn > 0 {
		snap = e.fleet.Churn(cluster, churn, time.Now())
	}
	return snap, e.cp.Set(cluster, snap)
}

// subscribe is a data plane's first StreamConfiguration request.
func subscribe(node, cluster, version string, types ...string) *controlv1.DiscoveryRequest {
	return &controlv1.DiscoveryRequest{NodeId: node, Cluster: cluster, Version: version, Subscriptions: types}
}

func ack(resp *controlv1.DiscoveryResponse) *controlv1.DiscoveryRequest {
	return &controlv1.DiscoveryRequest{Version: resp.GetVersion(), Nonce: resp.GetNonce(), ResultStatus: gatewaycp.ACK}
}

func nack(resp *controlv1.DiscoveryResponse, detail string) *controlv1.DiscoveryRequest {
	return &controlv1.DiscoveryRequest{Nonce: resp.GetNonce(), ResultStatus: gatewaycp.NACK, ErrorDetail: detail}
}

// wantSnapshot checks one response against what the control plane holds:
// its version and the whole snapshot, message for message.
func wantSnapshot(t *testing.T, resp *controlv1.DiscoveryResponse, snap *controlv1.ConfigSnapshot, version string) {
	t.Helper()
	if resp.GetVersion() != version || resp.GetNonce() == "" {
		t.Fatalf("response version %q nonce %q, want version %q with a nonce", resp.GetVersion(), resp.GetNonce(), version)
	}
	if !proto.Equal(resp.GetSnapshot(), snap) {
		t.Fatalf("snapshot %s differs from the control plane's", resp.GetVersion())
	}
}

// upstreamStreams counts the StreamConfiguration (or Delta) subscriptions
// the control plane received for cluster: requests without a nonce.
func upstreamStreams(cp *gatewaycp.Server, cluster string, delta bool) int {
	n := 0
	for _, r := range cp.Requests() {
		switch {
		case !delta && r.Sotw != nil && r.Sotw.GetCluster() == cluster && r.Sotw.GetNonce() == "":
			n++
		case delta && r.Delta != nil && r.Delta.GetCluster() == cluster && r.Delta.GetResponseNonce() == "" &&
			len(r.Delta.GetResourceNamesSubscribe()) > 0:
			n++
		}
	}
	return n
}

// resourcesOf returns a Delta response's resources by name → version.
func resourcesOf(resp *controlv1.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.GetResources() {
		out[r.GetName()] = r.GetVersion()
	}
	return out
}

// names returns the sorted keys of m.
func names(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func typeName(t string) string { return t[strings.LastIndexByte(t, '.')+1:] }
