package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// badInputEnv is a relay with a well-behaved client whose updates must keep
// flowing whatever another client does.
type badInputEnv struct {
	up    *xdstest.Upstream
	relay *xdstest.Relay
	good  *xdstest.ADSClient
	gen   int
	// refused counts the requests refused over a limit before the current
	// subtest's, whose client subscribed to the EDS name held
	// (overLimitClient).
	refused float64
	held    string
}

func newBadInputEnv(t *testing.T) *badInputEnv {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c0"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Limits.MaxNamesPerRequest = 100
		c.Limits.MaxSubscriptionsPerStream = 150
	}))
	good := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "good"})
	good.Subscribe(resource.ClusterType, "c0")
	good.Ack(good.RecvType(resource.ClusterType))
	return &badInputEnv{up: up, relay: r, good: good}
}

// stillServed changes the upstream and checks the good client gets it.
func (e *badInputEnv) stillServed(t *testing.T) {
	t.Helper()
	e.gen++
	e.up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c0", fmt.Sprintf("eds-%d", e.gen))}})
	resp := e.good.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0")
	e.good.Ack(resp)
}

// overLimitClient is an ADS client that subscribes to CDS c0 and to an EDS
// name the upstream does not have yet (held) before it goes over a limit.
func (e *badInputEnv) overLimitClient(t *testing.T) *xdstest.ADSClient {
	e.refused = e.refusedOverLimit(t)
	e.held = fmt.Sprintf("held-%d", e.gen)
	c := xdstest.DialADS(t, e.relay.Addr(), &core.Node{Id: "big"})
	c.Subscribe(resource.ClusterType, "c0")
	c.Ack(c.RecvType(resource.ClusterType))
	c.Subscribe(resource.EndpointType, e.held)
	return c
}

// refusedForItsType checks that c's last EDS request, over a limit, was
// refused for EDS alone: counted, the stream open, CDS on it still served,
// and the client's previous EDS subscription (held) kept.
func (e *badInputEnv) refusedForItsType(t *testing.T, c *xdstest.ADSClient, reason string) {
	t.Helper()
	sample := fmt.Sprintf(`xds_relay_rejected_requests_total{reason=%q}`, reason)
	xdstest.Eventually(t, func() bool { return e.refusedOverLimit(t) > e.refused }, sample+" grows", nil)
	if got := xdstest.Metric(t, e.relay.Registry(), sample); got == 0 {
		t.Fatalf("%s = 0", sample)
	}
	e.stillServed(t)
	resp := c.RecvType(resource.ClusterType)
	wantNames(t, resp, "c0")
	c.Ack(resp)
	e.up.SetResources(xdstest.Resources{
		resource.ClusterType:  {xdstest.EDSCluster("c0", fmt.Sprintf("eds-%d", e.gen))},
		resource.EndpointType: {xdstest.Endpoints(e.held, "127.0.0.1:1")},
	})
	if got := c.RecvType(resource.EndpointType); len(got.GetResources()) != 1 {
		t.Fatalf("EDS after the refused request: %d resources, want %s", len(got.GetResources()), e.held)
	}
}

// refusedOverLimit sums the requests refused over a limit.
func (e *badInputEnv) refusedOverLimit(t *testing.T) float64 {
	return xdstest.Metric(t, e.relay.Registry(), `xds_relay_rejected_requests_total{reason="too_many_names"}`) +
		xdstest.Metric(t, e.relay.Registry(), `xds_relay_rejected_requests_total{reason="too_many_subscriptions"}`)
}

func wantCode(t *testing.T, c *xdstest.ADSClient, code codes.Code, msg string) {
	t.Helper()
	err := c.Err()
	if grpcstatus.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("stream error %v, want %v containing %q", err, code, msg)
	}
}

func TestBadInput(t *testing.T) {
	e := newBadInputEnv(t)
	node := func(id string) *core.Node { return &core.Node{Id: id} }

	t.Run("empty type URL on ADS", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("bad"))
		c.Subscribe("", "x")
		wantCode(t, c, codes.InvalidArgument, "type_url is required")
		e.stillServed(t)
	})
	t.Run("malformed type URL", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("bad"))
		c.Subscribe("not a type url", "x")
		wantCode(t, c, codes.InvalidArgument, "malformed type_url")
		e.stillServed(t)
	})
	t.Run("unknown type URL is relayed", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("odd"))
		c.Subscribe("type.googleapis.com/example.Unknown", "x")
		c.ExpectNoResponse(quiet)
		e.stillServed(t)
	})
	t.Run("too many names", func(t *testing.T) {
		c := e.overLimitClient(t)
		names := make([]string, 101)
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
		}
		c.Subscribe(resource.EndpointType, names...)
		e.refusedForItsType(t, c, "too_many_names")
	})
	t.Run("too many TP2 locators", func(t *testing.T) {
		c := e.overLimitClient(t)
		locs := make([]*discoverygrpc.ResourceLocator, 101)
		for i := range locs {
			locs[i] = xdstest.Locator("n", "i", fmt.Sprint(i)) // 101 parameter sets of one name
		}
		c.SubscribeLocators(resource.EndpointType, nil, locs...)
		e.refusedForItsType(t, c, "too_many_names")
	})
	t.Run("name with a NUL byte", func(t *testing.T) {
		// The NUL separates a subscription key's name from its parameters.
		for _, locs := range [][]*discoverygrpc.ResourceLocator{nil, {xdstest.Locator("n\x00x", "env", "prod")}} {
			c := xdstest.DialADS(t, e.relay.Addr(), node("bad"))
			var names []string
			if locs == nil {
				names = []string{"n\x00env=prod"}
			}
			c.SubscribeLocators(resource.EndpointType, names, locs...)
			wantCode(t, c, codes.InvalidArgument, "NUL byte")
		}
		e.stillServed(t)
	})
	t.Run("too many subscriptions on one stream", func(t *testing.T) {
		c := e.overLimitClient(t)
		for _, typ := range []string{resource.RouteType, resource.EndpointType} {
			names := make([]string, 80)
			for i := range names {
				names[i] = fmt.Sprintf("%s-%d", typ, i)
			}
			c.Subscribe(typ, names...)
		}
		e.refusedForItsType(t, c, "too_many_subscriptions")
	})
	t.Run("nonce never sent", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("bad"))
		c.Subscribe(resource.ClusterType, "c0")
		c.Ack(c.RecvType(resource.ClusterType))
		if err := c.Send(xdstest.SotWRequest(resource.ClusterType, "", "no-such-nonce", "c0", "c1")); err != nil {
			t.Fatal(err)
		}
		c.ExpectNoResponse(quiet)
		e.stillServed(t)
	})
	t.Run("second node differs", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("first"))
		c.Subscribe(resource.ClusterType, "c0")
		resp := c.RecvType(resource.ClusterType)
		req := xdstest.SotWRequest(resource.ClusterType, resp.GetVersionInfo(), resp.GetNonce(), "c0")
		req.Node = node("second")
		if err := c.Send(req); err != nil {
			t.Fatal(err)
		}
		wantCode(t, c, codes.InvalidArgument, "node changed")
		e.stillServed(t)
	})
	t.Run("NACK storm", func(t *testing.T) {
		c := xdstest.DialADS(t, e.relay.Addr(), node("storm"))
		c.Subscribe(resource.ClusterType, "c0")
		resp := c.RecvType(resource.ClusterType)
		for i := range 500 {
			req := xdstest.SotWRequest(resource.ClusterType, "", resp.GetNonce(), "c0")
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("nack %d", i)}
			if err := c.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		c.ExpectNoResponse(quiet)
		e.stillServed(t)
	})
	t.Run("client vanishes mid-response", func(t *testing.T) {
		for range 20 {
			conn, err := grpc.NewClient(e.relay.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err == nil {
				_ = s.Send(&discoverygrpc.DiscoveryRequest{Node: node("gone"), TypeUrl: resource.ClusterType, ResourceNames: []string{"*"}})
			}
			cancel()
			_ = conn.Close()
		}
		e.stillServed(t)
	})
}

// Streams beyond the new-stream rate are refused with RESOURCE_EXHAUSTED;
// admitted streams are served.
func TestAdmissionControl(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c0"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Limits.NewStreamsPerSecond = 3 }))
	refused, served := 0, 0
	for i := range 10 {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("n%d", i)})
		req := xdstest.SotWRequest(resource.ClusterType, "", "", "c0")
		req.Node = &core.Node{Id: "n"}
		_ = c.Send(req) // a refused stream may be gone before the request
		resp, err := c.Recv(context.Background())
		switch {
		case err == nil && resp != nil:
			served++
		case grpcstatus.Code(errors.Unwrap(err)) == codes.ResourceExhausted || strings.Contains(err.Error(), "ResourceExhausted"):
			refused++
		default:
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if served == 0 || refused == 0 {
		t.Fatalf("served %d, refused %d: want both", served, refused)
	}
}
