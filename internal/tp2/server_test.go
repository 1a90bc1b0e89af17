package tp2_test

import (
	"context"
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// tp2Client is a raw ADS stream (SotW or Delta) whose responses arrive on a
// channel.
type tp2Client struct {
	t     *testing.T
	cs    grpc.ClientStream
	resps chan proto.Message
}

func dialTP2(t *testing.T, addr string, delta bool) *tp2Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ads := discoverypb.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	c := &tp2Client{t: t, resps: make(chan proto.Message, 16)}
	var recv func() (proto.Message, error)
	if delta {
		s, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.cs, recv = s, func() (proto.Message, error) { return s.Recv() }
	} else {
		s, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.cs, recv = s, func() (proto.Message, error) { return s.Recv() }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			select {
			case c.resps <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	return c
}

func (c *tp2Client) send(req proto.Message) {
	c.t.Helper()
	if err := c.cs.SendMsg(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *tp2Client) next() proto.Message {
	c.t.Helper()
	select {
	case m := <-c.resps:
		return m
	case <-time.After(xdstest.WaitTimeout):
		c.t.Fatalf("no response within %v", xdstest.WaitTimeout)
		return nil
	}
}

func (c *tp2Client) sotw() *discoverypb.DiscoveryResponse {
	c.t.Helper()
	return c.next().(*discoverypb.DiscoveryResponse)
}

func (c *tp2Client) delta() *discoverypb.DeltaDiscoveryResponse {
	c.t.Helper()
	return c.next().(*discoverypb.DeltaDiscoveryResponse)
}

func (c *tp2Client) none() {
	c.t.Helper()
	select {
	case m := <-c.resps:
		c.t.Fatalf("unexpected response: %v", m)
	case <-time.After(200 * time.Millisecond):
	}
}

func mustConstraints(t *testing.T, s string) *discoverypb.DynamicParameterConstraints {
	t.Helper()
	c, err := keying.ParseConstraints(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// route is a RouteConfiguration whose one virtual host names the variant.
func route(name, tag string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{Name: tag, Domains: []string{"*"}}}}
}

// tp2Got is a received variant: "name [constraints] tag@version".
type tp2Got struct{ name, constraints, tag, version string }

func gotOf(t *testing.T, r *discoverypb.Resource) tp2Got {
	t.Helper()
	rc := &routev3.RouteConfiguration{}
	if err := r.GetResource().UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	return tp2Got{r.GetResourceName().GetName(), keying.CanonicalConstraints(r.GetResourceName().GetDynamicParameterConstraints()),
		rc.GetVirtualHosts()[0].GetName(), r.GetVersion()}
}

func sotwGot(t *testing.T, resp *discoverypb.DiscoveryResponse) []tp2Got {
	t.Helper()
	var out []tp2Got
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != keying.ResourceWrapperType {
			t.Fatalf("resource type %q, want the Resource wrapper", a.GetTypeUrl())
		}
		r := &discoverypb.Resource{}
		if err := anypb.UnmarshalTo(a, r, proto.UnmarshalOptions{}); err != nil {
			t.Fatal(err)
		}
		out = append(out, gotOf(t, r))
	}
	return out
}

func locator(name string, params map[string]string) *discoverypb.ResourceLocator {
	return &discoverypb.ResourceLocator{Name: name, DynamicParameters: params}
}

func TestTP2SotW(t *testing.T) {
	s := xdstest.StartTP2(t)
	prod, test := mustConstraints(t, "env=prod"), mustConstraints(t, "env=test")
	s.Set(keying.RouteType, "rc", prod, route("rc", "prod"))
	s.Set(keying.RouteType, "rc", test, route("rc", "test"))

	a, b, plain := dialTP2(t, s.Addr(), false), dialTP2(t, s.Addr(), false), dialTP2(t, s.Addr(), false)
	// a holds two subscriptions selecting the same variant: it comes once.
	a.send(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceLocators: []*discoverypb.ResourceLocator{
		locator("rc", map[string]string{"env": "prod"}), locator("rc", map[string]string{"env": "prod", "x": "1"})}})
	b.send(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceLocators: []*discoverypb.ResourceLocator{
		locator("rc", map[string]string{"env": "test"})}})
	plain.send(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, ResourceNames: []string{"rc"}})

	ra, rb := a.sotw(), b.sotw()
	if got := sotwGot(t, ra); len(got) != 1 || got[0].constraints != "env=prod" || got[0].tag != "prod" || got[0].name != "rc" {
		t.Fatalf("a got %v", got)
	}
	if got := sotwGot(t, rb); len(got) != 1 || got[0].constraints != "env=test" || got[0].tag != "test" {
		t.Fatalf("b got %v", got)
	}
	if got := sotwGot(t, plain.sotw()); len(got) != 0 {
		t.Fatalf("plain name (no params) got %v, want nothing", got)
	}
	want := []string{"rc", "rc{env=prod&x=1}", "rc{env=prod}", "rc{env=test}"}
	if got := s.Subscriptions(keying.RouteType); !slices.Equal(got, want) {
		t.Fatalf("Subscriptions = %q, want %q", got, want)
	}
	if n := s.Streams(); n != 3 {
		t.Fatalf("Streams = %d, want 3", n)
	}

	// ACK: no response.
	a.send(&discoverypb.DiscoveryRequest{TypeUrl: keying.RouteType, VersionInfo: ra.GetVersionInfo(), ResponseNonce: ra.GetNonce(),
		ResourceLocators: []*discoverypb.ResourceLocator{
			locator("rc", map[string]string{"env": "prod", "x": "1"}), locator("rc", map[string]string{"env": "prod"})}})
	a.none()

	// A Set of the prod variant reaches a only.
	s.Set(keying.RouteType, "rc", prod, route("rc", "prod2"))
	ra2 := a.sotw()
	if got := sotwGot(t, ra2); len(got) != 1 || got[0].tag != "prod2" || got[0].version == sotwGot(t, ra)[0].version {
		t.Fatalf("a after Set got %v", got)
	}
	b.none()
	plain.none()

	// Deleting it leaves a with an empty full state.
	s.Delete(keying.RouteType, "rc", prod)
	if got := sotwGot(t, a.sotw()); len(got) != 0 {
		t.Fatalf("a after Delete got %v", got)
	}
	b.none()
}

func TestTP2DeltaTransition(t *testing.T) {
	s := xdstest.StartTP2(t)
	prod := mustConstraints(t, "env=prod")
	s.Set(keying.RouteType, "rc", prod, route("rc", "prod"))
	s.Set(keying.RouteType, "rc", mustConstraints(t, "env=test"), route("rc", "test"))

	c := dialTP2(t, s.Addr(), true)
	c.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResourceLocatorsSubscribe: []*discoverypb.ResourceLocator{
		locator("rc", map[string]string{"env": "prod", "version": "v1"})}})
	r := c.delta()
	if len(r.GetResources()) != 1 || len(r.GetRemovedResourceNames()) != 0 {
		t.Fatalf("first response %v", r)
	}
	if got := gotOf(t, r.GetResources()[0]); got.constraints != "env=prod" || got.tag != "prod" {
		t.Fatalf("first response got %v", got)
	}
	c.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: r.GetNonce()})
	c.none()

	// The transition: one response with the new variant and the removal of the old.
	s.Apply(keying.RouteType, []xdstest.VariantRef{{Name: "rc", Constraints: prod}}, []xdstest.TP2Variant{
		{Name: "rc", Constraints: mustConstraints(t, "and(env=prod,version=v1)"), Resource: route("rc", "prod-v1")},
		{Name: "rc", Constraints: mustConstraints(t, "and(env=prod,not(exists(version)))"), Resource: route("rc", "prod-old")},
	})
	r = c.delta()
	if len(r.GetResources()) != 1 || len(r.GetRemovedResourceNames()) != 1 {
		t.Fatalf("transition response %v", r)
	}
	if got := gotOf(t, r.GetResources()[0]); got.constraints != "and(env=prod,version=v1)" || got.tag != "prod-v1" {
		t.Fatalf("transition sent %v", got)
	}
	if rm := r.GetRemovedResourceNames()[0]; rm.GetName() != "rc" || keying.CanonicalConstraints(rm.GetDynamicParameterConstraints()) != "env=prod" {
		t.Fatalf("transition removed %v", rm)
	}
	c.none()

	// A client without the new key gets the not(exists) variant; unsubscribing sends nothing.
	c.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: r.GetNonce(),
		ResourceLocatorsSubscribe: []*discoverypb.ResourceLocator{locator("rc", map[string]string{"env": "prod"})}})
	r = c.delta()
	if len(r.GetResources()) != 1 || gotOf(t, r.GetResources()[0]).tag != "prod-old" || len(r.GetRemovedResourceNames()) != 0 {
		t.Fatalf("second subscription got %v", r)
	}
	want := []string{"rc{env=prod&version=v1}", "rc{env=prod}"}
	if got := s.Subscriptions(keying.RouteType); !slices.Equal(got, want) {
		t.Fatalf("Subscriptions = %q, want %q", got, want)
	}
	c.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: keying.RouteType, ResponseNonce: r.GetNonce(),
		ResourceLocatorsUnsubscribe: []*discoverypb.ResourceLocator{locator("rc", map[string]string{"env": "prod"})}})
	c.none()
	if got := s.Subscriptions(keying.RouteType); !slices.Equal(got, want[:1]) {
		t.Fatalf("Subscriptions after unsubscribe = %q", got)
	}

	// Deleting the selected variant removes it.
	s.Delete(keying.RouteType, "rc", mustConstraints(t, "and(version=v1,env=prod)"))
	r = c.delta()
	if len(r.GetResources()) != 0 || len(r.GetRemovedResourceNames()) != 1 ||
		keying.CanonicalConstraints(r.GetRemovedResourceNames()[0].GetDynamicParameterConstraints()) != "and(env=prod,version=v1)" {
		t.Fatalf("after Delete got %v", r)
	}
}
