package relay_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// startTP3Upstream serves the clusters asked for, except the names in errs,
// which get TP3 resource_errors (go-control-plane sends none).
func startTP3Upstream(t *testing.T, errs map[string]codes.Code) string {
	return startFakeCDS(t, &fakeCDS{answer: tp3Answer(errs)})
}

// tp3Answer answers with the clusters asked for, except the names in errs,
// which get TP3 resource_errors.
func tp3Answer(errs map[string]codes.Code) func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
	return func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range names {
			if code, bad := errs[n]; bad {
				resp.ResourceErrors = append(resp.ResourceErrors, &discoverygrpc.ResourceError{
					ResourceName: &discoverygrpc.ResourceName{Name: n},
					ErrorDetail:  &status.Status{Code: int32(code), Message: "upstream says " + code.String()}})
				continue
			}
			a, err := anypb.New(xdstest.EDSCluster(n, "eds-"+n))
			if err != nil {
				return nil, err
			}
			resp.Resources = append(resp.Resources, a)
		}
		return resp, nil
	}
}

func errorsByName(resp *discoverygrpc.DiscoveryResponse) map[string]codes.Code {
	out := map[string]codes.Code{}
	for _, e := range resp.GetResourceErrors() {
		out[e.GetResourceName().GetName()] = codes.Code(e.GetErrorDetail().GetCode())
	}
	return out
}

// TP3: the upstream's resource_errors reach clients, the LDS/CDS full state
// still carries every other resource, and a later subscriber gets the cached
// errors replayed at once.
func TestUpstreamResourceErrorsReplayed(t *testing.T) {
	addr := startTP3Upstream(t, map[string]codes.Code{"gone": codes.NotFound, "flaky": codes.Unavailable})
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, "ok", "gone", "flaky")
	resp := a.RecvType(resource.ClusterType)
	for len(resp.GetResources()) == 0 || len(resp.GetResourceErrors()) < 2 {
		a.Ack(resp)
		resp = a.RecvType(resource.ClusterType)
	}
	wantNames(t, resp, "ok")
	if got := errorsByName(resp); got["gone"] != codes.NotFound || got["flaky"] != codes.Unavailable {
		t.Fatalf("resource_errors %v", got)
	}

	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
	late.Subscribe(resource.ClusterType, "gone", "flaky")
	if got := errorsByName(late.RecvType(resource.ClusterType)); got["gone"] != codes.NotFound || got["flaky"] != codes.Unavailable {
		t.Fatalf("replayed resource_errors %v", got)
	}
}

// With no upstream reachable and nothing cached, a subscriber gets a TP3
// UNAVAILABLE error before its own does-not-exist timer fires.
func TestUnavailableWhenNoUpstream(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	r := xdstest.StartRelay(t, dead, xdstest.WithConfig(func(c *config.Config) { c.Upstream.UnavailableAfter = 200 * time.Millisecond }))
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.EndpointType, "e1")
	if got := errorsByName(c.RecvType(resource.EndpointType)); got["e1"] != codes.Unavailable {
		t.Fatalf("resource_errors %v, want UNAVAILABLE for e1", got)
	}
}

// The relay's own UNAVAILABLE for a name goes with the name's last
// subscriber: left behind, it kept the name from counting as gone when the
// upstream came back with a wildcard set without it, and a wildcard client
// that brought it from elsewhere held it for good.
func TestOwnUnavailableEndsWithItsSubscription(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	up.Stop()
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.UnavailableAfter = 100 * time.Millisecond
		c.Upstream.Linger = 20 * time.Millisecond
	}))
	named := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, "c10")
	if got := errorsByName(named.RecvType(resource.ClusterType)); got["c10"] != codes.Unavailable {
		t.Fatalf("resource_errors %v, want UNAVAILABLE for c10", got)
	}
	named.Close()
	waitUpstream(t, r, resource.ClusterType, false) // the linger of c10 passed

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"c10": "v-elsewhere"}})
	up.Restart()
	held := map[string]bool{"c10": true}
	deadline := time.Now().Add(5 * time.Second)
	for !(len(held) == 1 && held["c1"]) {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			t.Fatalf("the wildcard client holds %v, want only c1: c10 does not exist upstream", held)
		}
		got, removed := deltaNames(resp)
		for _, n := range got {
			held[n] = true
		}
		for _, n := range removed {
			delete(held, n)
		}
		wild.Ack(resp)
	}
}

// A cached NOT_FOUND is the upstream's word like a removal: while that
// upstream is away, a Delta client that came from another replica with the
// resource is not told it is NOT_FOUND (nor removed); once the upstream is
// back and says so again, it is (a review suspected the error path skipped
// the check a removal gets).
func TestDeltaNotFoundFromUnconfirmedDataHeld(t *testing.T) {
	var away atomic.Bool
	answer := tp3Answer(map[string]codes.Code{"gone": codes.NotFound})
	addr := startFakeCDS(t, &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		if away.Load() {
			return nil, errors.New("away") // ends the stream at once: nothing settles
		}
		return answer(names)
	}})
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	a := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	a.Subscribe(resource.ClusterType, "gone")
	resp := a.RecvType(resource.ClusterType)
	if got := errorsByName(resp); got["gone"] != codes.NotFound {
		t.Fatalf("resource_errors %v", got)
	}
	a.Ack(resp)
	away.Store(true)
	a.Subscribe(resource.ClusterType, "gone", "other") // a request the upstream ends its stream on
	xdstest.Eventually(t, func() bool {
		return metricValue(t, r.Relay, "xds_relay_upstream_reconnects_total", map[string]string{"server": addr}) > 0
	}, "the upstream's stream gone", nil)

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "moved"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"gone"},
		InitialResourceVersions: map[string]string{"gone": "v-elsewhere"}})
	told := func(resp *discoverygrpc.DeltaDiscoveryResponse) bool {
		return slices.Contains(resp.GetRemovedResources(), "gone") || len(resp.GetResourceErrors()) > 0
	}
	for deadline := time.Now().Add(quiet); time.Now().Before(deadline); {
		if resp, ok := d.TryRecv(100 * time.Millisecond); ok {
			if told(resp) {
				t.Fatalf("told NOT_FOUND from a cached error while its upstream is away: %v", resp)
			}
			d.Ack(resp)
		}
	}

	away.Store(false)
	for resp := d.MustRecv(); !told(resp); resp = d.MustRecv() {
		d.Ack(resp)
	}
}

// The upstream's error for a TP2 variant replaces the relay's own UNAVAILABLE
// for the keys it matches, and is the upstream's word from then on: the
// does-not-exist wait still running for the key must not take it for the
// relay's own and clear it on silence. It did (the key's unreachable was
// left set): the client was sent a response without the error, and a later
// subscriber with the same parameters was not told of it.
func TestVariantErrorReplacesOwnUnavailable(t *testing.T) {
	var away atomic.Bool
	away.Store(true)
	addr := startFakeCDS(t, &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		if away.Load() {
			return nil, errors.New("away") // ends the stream at once: the authority stays unreachable
		}
		resp := &discoverygrpc.DiscoveryResponse{}
		if slices.Contains(names, "c1{env=prod}") {
			resp.ResourceErrors = append(resp.ResourceErrors, &discoverygrpc.ResourceError{
				ResourceName: &discoverygrpc.ResourceName{Name: "c1", DynamicParameterConstraints: eq("env", "prod")},
				ErrorDetail:  &status.Status{Code: int32(codes.NotFound), Message: "no prod c1"}})
		}
		return resp, nil
	}})
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
		c.Upstream.UnavailableAfter = 100 * time.Millisecond
		c.Upstream.DoesNotExistAfter = 100 * time.Millisecond
	}))

	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	resp := prod.RecvType(resource.ClusterType)
	for errorsByName(resp)["c1"] != codes.Unavailable {
		prod.Ack(resp)
		resp = prod.RecvType(resource.ClusterType)
	}
	prod.Ack(resp)
	away.Store(false)
	for resp = prod.RecvType(resource.ClusterType); errorsByName(resp)["c1"] != codes.NotFound; resp = prod.RecvType(resource.ClusterType) {
		prod.Ack(resp)
	}
	prod.Ack(resp)

	// Ten does-not-exist waits: the wait that ran for the key fires in
	// the first two (it asks on a new stream once, then takes silence).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		resp, err := prod.Recv(ctx)
		if err != nil {
			break // the ten waits passed
		}
		if errorsByName(resp)["c1"] != codes.NotFound {
			t.Fatalf("the upstream's NOT_FOUND left: %v", resp)
		}
		prod.Ack(resp)
	}
	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late-prod"})
	late.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	if got := errorsByName(late.RecvType(resource.ClusterType)); got["c1"] != codes.NotFound {
		t.Fatalf("replayed errors %v, want the upstream's NOT_FOUND", got)
	}
}
