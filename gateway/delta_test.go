package gateway_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// deltaDP is a Delta data plane that applies every response to what it
// holds (type → name → version) and checks each one as it arrives.
type deltaDP struct {
	*xdstest.GatewayDelta
	t    *testing.T
	held map[string]map[string]string
}

func dialDelta(t *testing.T, e *env, node, cluster string, types []string, initial map[string]map[string]string) *deltaDP {
	t.Helper()
	d := &deltaDP{GatewayDelta: xdstest.DialGatewayDelta(t, e.relay.Addr()), t: t, held: map[string]map[string]string{}}
	req := &controlv1.DeltaDiscoveryRequest{NodeId: node, Cluster: cluster, ResourceNamesSubscribe: types,
		InitialResourceVersions: map[string]string{}}
	for typ, vs := range initial {
		b, _ := json.Marshal(vs)
		req.InitialResourceVersions[typ] = string(b)
		d.held[typ] = maps.Clone(vs)
	}
	d.Send(req)
	return d
}

// recv takes the next response, checks it (a known type, a nonce, no name
// both sent and removed, every resource of the response's type) and applies
// it; it ACKs it unless nack is set.
func (d *deltaDP) recv(nack string) *controlv1.DeltaDiscoveryResponse {
	d.t.Helper()
	resp := d.MustRecv()
	if resp.GetNonce() == "" || resp.GetTypeUrl() == "" {
		d.t.Fatalf("response without nonce or type: %v", resp)
	}
	h := d.held[resp.GetTypeUrl()]
	if h == nil {
		h = map[string]string{}
		d.held[resp.GetTypeUrl()] = h
	}
	for _, r := range resp.GetResources() {
		if r.GetResource().GetTypeUrl() != resp.GetTypeUrl() {
			d.t.Fatalf("resource %s of type %s in a %s response", r.GetName(), r.GetResource().GetTypeUrl(), resp.GetTypeUrl())
		}
	}
	for _, n := range xdstest.ApplyDelta(h, resp.GetResources(), resp.GetRemovedResources()) {
		d.t.Fatalf("%s both sent and removed", n)
	}
	v := &controlv1.DeltaDiscoveryRequest{ResponseNonce: resp.GetNonce(), TypeUrl: resp.GetTypeUrl(), ResultStatus: gatewaycp.ACK}
	if nack != "" {
		v.ResultStatus, v.ErrorDetail = gatewaycp.NACK, nack
	}
	d.Send(v)
	return resp
}

// wantHeld checks that the data plane holds exactly the control plane's
// resources of typ, at their versions.
func (d *deltaDP) wantHeld(cp *gatewaycp.Server, cluster, typ string) {
	d.t.Helper()
	if want := cp.Resources(cluster, typ); !maps.Equal(d.held[typ], want) {
		d.t.Fatalf("%s held %v, the control plane has %v", typeName(typ), d.held[typ], want)
	}
}

// Per type, the data plane gets the control plane's resources with their
// versions, then only what changes — an update, a removal — and a NACKed
// version is not resent.
func TestDeltaResources(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	types := []string{controlv1.ListenerType, controlv1.HttpRouteType, controlv1.BackendClusterType}
	dp := dialDelta(t, e, "blue-1", "blue", types, nil)
	for range types {
		dp.recv("")
	}
	for _, typ := range types {
		dp.wantHeld(e.cp, "blue", typ)
	}

	// One route changes: exactly that route arrives.
	e.publish("blue", 1)
	r := dp.recv("")
	if r.GetTypeUrl() != controlv1.HttpRouteType || len(r.GetResources()) != 1 || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after one route changed: %v", r)
	}
	dp.wantHeld(e.cp, "blue", controlv1.HttpRouteType)

	// The next change is NACKed: it is not sent again; the one after is.
	e.publish("blue", 1)
	dp.recv("route rejected")
	dp.ExpectNone(quiet)
	e.publish("blue", 1)
	dp.recv("")
	dp.wantHeld(e.cp, "blue", controlv1.HttpRouteType)

	// A route removed upstream is removed downstream.
	snap, _ := e.cp.Snapshot("blue")
	smaller := proto.Clone(snap).(*controlv1.ConfigSnapshot)
	smaller.HttpRoutes = smaller.HttpRoutes[:len(smaller.HttpRoutes)-1]
	e.cp.Set("blue", smaller)
	r = dp.recv("")
	if len(r.GetRemovedResources()) != 1 || r.GetRemovedResources()[0] != "default/route-3" {
		t.Fatalf("after a route was removed: %v", r)
	}
	dp.wantHeld(e.cp, "blue", controlv1.HttpRouteType)
	dp.ExpectNone(quiet)
	if n := upstreamStreams(e.cp, "blue", true); n != 1 {
		t.Errorf("%d upstream Delta subscriptions, want 1", n)
	}
}

// A data plane that reconnects with initial_resource_versions is sent only
// what it does not hold at the current version, and told of what it holds
// that the control plane no longer has.
func TestDeltaInitialVersions(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	types := []string{controlv1.ListenerType, controlv1.HttpRouteType}
	first := dialDelta(t, e, "blue-1", "blue", types, nil)
	first.recv("")
	first.recv("")

	initial := map[string]map[string]string{controlv1.HttpRouteType: maps.Clone(first.held[controlv1.HttpRouteType])}
	initial[controlv1.HttpRouteType]["default/gone"] = "v0"
	second := dialDelta(t, e, "blue-2", "blue", types, initial)
	got := map[string]*controlv1.DeltaDiscoveryResponse{}
	for range types {
		r := second.recv("")
		got[r.GetTypeUrl()] = r
	}
	if r := got[controlv1.HttpRouteType]; len(r.GetResources()) != 0 || strings.Join(r.GetRemovedResources(), ",") != "default/gone" {
		t.Fatalf("routes after reconnecting: %v, want only the removal of default/gone", r)
	}
	if r := got[controlv1.ListenerType]; len(r.GetResources()) != spec.Listeners {
		t.Fatalf("listeners (no initial versions): %d, want all %d", len(r.GetResources()), spec.Listeners)
	}
	for _, typ := range types {
		second.wantHeld(e.cp, "blue", typ)
	}
	second.ExpectNone(quiet)
}

// Bad Delta requests end the stream with a clear status.
func TestDeltaBadRequests(t *testing.T) {
	tests := []struct {
		name string
		req  *controlv1.DeltaDiscoveryRequest
		code codes.Code
		msg  string
	}{
		{"no node", &controlv1.DeltaDiscoveryRequest{Cluster: "blue"}, codes.InvalidArgument, "node_id is required"},
		{"initial versions not JSON", &controlv1.DeltaDiscoveryRequest{NodeId: "n", Cluster: "blue",
			InitialResourceVersions: map[string]string{controlv1.ListenerType: "{listener-0/8000: v1}"}},
			codes.InvalidArgument, `initial_resource_versions["type.googleapis.com/gateway.control.v1.Listener"]: not a JSON object`},
		{"initial versions not strings", &controlv1.DeltaDiscoveryRequest{NodeId: "n", Cluster: "blue",
			InitialResourceVersions: map[string]string{controlv1.ListenerType: `{"a": 1}`}}, codes.InvalidArgument, "not a JSON object"},
		{"bad type", &controlv1.DeltaDiscoveryRequest{NodeId: "n", Cluster: "blue", ResourceNamesSubscribe: []string{"x y/z"}},
			codes.InvalidArgument, "malformed type URL"},
		{"secrets over plaintext", &controlv1.DeltaDiscoveryRequest{NodeId: "n", Cluster: "blue",
			ResourceNamesSubscribe: []string{controlv1.SecretMaterialType}}, codes.PermissionDenied, "mTLS"},
	}
	e := start(t, xdstest.WithConfig(func(c *config.Config) { c.Authorization = nil }))
	e.publish("blue", 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dp := xdstest.DialGatewayDelta(t, e.relay.Addr())
			dp.Send(tt.req)
			_, err := dp.Recv()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("stream ended with %v, want %v %q", err, tt.code, tt.msg)
			}
		})
	}
}

// A data plane that comes while the upstream is away, holding resources
// the relay's cache lacks, is told of no removal: the cache's word went stale
// with the upstream stream. Once the upstream answers again, it is told what
// is gone — and only that.
func TestDeltaNoRemovalWhileUpstreamAway(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	types := []string{controlv1.HttpRouteType}
	first := dialDelta(t, e, "blue-1", "blue", types, nil)
	first.recv("")

	e.cp.Stop()
	xdstest.Eventually(t, func() bool { return !e.relay.DebugGateway("").Groups[0].Connected },
		"the gateway's upstream stream ended", nil)
	initial := map[string]map[string]string{controlv1.HttpRouteType: maps.Clone(first.held[controlv1.HttpRouteType])}
	initial[controlv1.HttpRouteType]["default/elsewhere"] = "v0" // what another replica's upstream had
	second := dialDelta(t, e, "blue-2", "blue", types, initial)
	second.ExpectNone(quiet)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := e.cp.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r := second.recv("")
	if len(r.GetResources()) != 0 || strings.Join(r.GetRemovedResources(), ",") != "default/elsewhere" {
		t.Fatalf("once the upstream answered again: %v, want only the removal of default/elsewhere", r)
	}
	second.wantHeld(e.cp, "blue", controlv1.HttpRouteType)
}

// A data plane that comes while the upstream is away, holding newer
// versions than the relay's cache (from a replica that is ahead), is not
// sent the cache's versions over them: they may be older. Once the upstream
// answers again, it is sent what it lacks — and only that.
func TestDeltaNoRollbackWhileUpstreamAway(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	types := []string{controlv1.HttpRouteType}
	first := dialDelta(t, e, "blue-1", "blue", types, nil)
	first.recv("")

	e.cp.Stop()
	xdstest.Eventually(t, func() bool { return !e.relay.DebugGateway("").Groups[0].Connected },
		"the gateway's upstream stream ended", nil)
	e.publish("blue", 1) // what a replica still connected has sent its data planes
	ahead := map[string]map[string]string{controlv1.HttpRouteType: e.cp.Resources("blue", controlv1.HttpRouteType)}
	second := dialDelta(t, e, "blue-2", "blue", types, ahead)
	second.ExpectNone(quiet)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := e.cp.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	first.recv("")
	first.wantHeld(e.cp, "blue", controlv1.HttpRouteType)
	// It holds the upstream's versions already: its first answer is empty.
	if r := second.recv(""); len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("once the upstream answered again: %v, want an empty answer", r)
	}
	second.wantHeld(e.cp, "blue", controlv1.HttpRouteType)
}
