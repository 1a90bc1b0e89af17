package relay_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/relay"
)

// xRFC TP2 through the relay, against a TP2-capable upstream
// (xdstest.StartTP2; go-control-plane ignores locators).

// Constraint builders for the variants of these tests.
var (
	eq     = keying.ValueConstraint
	exists = keying.ExistsConstraint
)

func and(cs ...*discoverygrpc.DynamicParameterConstraints) *discoverygrpc.DynamicParameterConstraints {
	return &discoverygrpc.DynamicParameterConstraints{Type: &discoverygrpc.DynamicParameterConstraints_AndConstraints{
		AndConstraints: &discoverygrpc.DynamicParameterConstraints_ConstraintList{Constraints: cs}}}
}

func not(c *discoverygrpc.DynamicParameterConstraints) *discoverygrpc.DynamicParameterConstraints {
	return &discoverygrpc.DynamicParameterConstraints{Type: &discoverygrpc.DynamicParameterConstraints_NotConstraints{NotConstraints: c}}
}

// routes is variant vh of the RouteConfiguration "routes": its one virtual
// host is named vh, so a test can tell variants apart.
func routes(vh string) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: "routes", VirtualHosts: []*route.VirtualHost{{Name: vh, Domains: []string{"*"}}}}
}

// got is one received resource: its variant (virtual host name) and, when it
// came wrapped for a TP2 subscriber, its canonical constraints.
type got struct {
	vh, constraints string
	wrapped         bool
}

func decodeRoute(t *testing.T, typeURL string, value []byte) string {
	t.Helper()
	if typeURL != resource.RouteType {
		t.Fatalf("inner type %s", typeURL)
	}
	rc := &route.RouteConfiguration{}
	if err := proto.Unmarshal(value, rc); err != nil {
		t.Fatal(err)
	}
	return rc.GetVirtualHosts()[0].GetName()
}

func fromWrapper(t *testing.T, w *discoverygrpc.Resource) got {
	t.Helper()
	g := got{vh: decodeRoute(t, w.GetResource().GetTypeUrl(), w.GetResource().GetValue())}
	if rn := w.GetResourceName(); rn != nil {
		g.wrapped = true
		g.constraints = keying.CanonicalConstraints(rn.GetDynamicParameterConstraints())
		if rn.GetName() != "routes" || w.GetName() != "" {
			t.Fatalf("wrapper names %q / %q", rn.GetName(), w.GetName())
		}
	}
	return g
}

// sotwRoutes decodes a SotW RDS response.
func sotwRoutes(t *testing.T, resp *discoverygrpc.DiscoveryResponse) []got {
	t.Helper()
	var out []got
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() == keying.ResourceWrapperType {
			w := &discoverygrpc.Resource{}
			if err := proto.Unmarshal(a.GetValue(), w); err != nil {
				t.Fatal(err)
			}
			out = append(out, fromWrapper(t, w))
			continue
		}
		out = append(out, got{vh: decodeRoute(t, a.GetTypeUrl(), a.GetValue())})
	}
	return out
}

func recvRoutes(t *testing.T, c *xdstest.ADSClient) []got {
	t.Helper()
	resp := c.RecvType(resource.RouteType)
	c.Ack(resp)
	return sotwRoutes(t, resp)
}

func wantGot(t *testing.T, what string, have []got, want ...got) {
	t.Helper()
	if !slices.Equal(have, want) {
		t.Fatalf("%s: got %+v, want %+v", what, have, want)
	}
}

func forProtocols(t *testing.T, f func(t *testing.T, protocol string)) {
	for _, p := range []string{"sotw", "delta"} {
		t.Run("upstream "+p, func(t *testing.T) { f(t, p) })
	}
}

// Two clients with different parameters get different variants, each with
// its constraints; one upstream subscription per distinct (name, params); a
// client whose parameters match a cached variant is answered at once; an
// update of one variant reaches only its subscribers; /debug/cache shows the
// variants with their constraints and subscribers.
func TestTP2VariantsPerParameters(t *testing.T) {
	forProtocols(t, func(t *testing.T, protocol string) {
		up := xdstest.StartTP2(t)
		up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
		up.Set(resource.RouteType, "routes", eq("env", "test"), routes("test"))
		r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = protocol }))

		prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod-1"})
		prod.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod"))
		wantGot(t, "prod", recvRoutes(t, prod), got{"prod", "env=prod", true})

		test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test-1"})
		test.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "test"))
		wantGot(t, "test", recvRoutes(t, test), got{"test", "env=test", true})

		// Same parameters: no new upstream subscription. Other parameters
		// matching a cached variant: answered from the cache, subscribed once.
		prod2 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod-2"})
		prod2.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod"))
		wantGot(t, "prod-2", recvRoutes(t, prod2), got{"prod", "env=prod", true})
		zoned := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod-zoned"})
		zoned.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod", "zone", "a"))
		wantGot(t, "prod zoned", recvRoutes(t, zoned), got{"prod", "env=prod", true})
		xdstest.Eventually(t, func() bool {
			return slices.Equal(up.Subscriptions(resource.RouteType),
				[]string{"routes{env=prod&zone=a}", "routes{env=prod}", "routes{env=test}"})
		}, "upstream subscriptions", func() any { return up.Subscriptions(resource.RouteType) })

		// A change of the prod variant reaches the prod subscribers only.
		up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod-v2"))
		for _, c := range []*xdstest.ADSClient{prod, prod2, zoned} {
			wantGot(t, "prod update", recvRoutes(t, c), got{"prod-v2", "env=prod", true})
		}
		test.ExpectNoResponse(quiet)

		entries := r.DebugCache(relay.CacheFilter{Type: "RouteConfiguration"})
		want := map[string]int{"env=prod": 3, "env=test": 1}
		if len(entries) != 2 {
			t.Fatalf("/debug/cache: %+v", entries)
		}
		for _, e := range entries {
			if e.Name != "routes" || want[e.Constraints] != e.Subscribers {
				t.Errorf("/debug/cache entry %+v, want subscribers %v", e, want)
			}
		}
	})
}

// The TP2 transition example: the server replaces the variant "env=prod"
// with "env=prod and version=v1" and "env=prod and no version" in one
// response. Each subscriber sees one update: the variant it now selects (a
// Delta client also the removal of the old variant, in the same response).
func TestTP2Transition(t *testing.T) {
	forProtocols(t, func(t *testing.T, protocol string) {
		up := xdstest.StartTP2(t)
		up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
		r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = protocol }))

		old := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "old"})
		old.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod"))
		wantGot(t, "old client", recvRoutes(t, old), got{"prod", "env=prod", true})

		d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "new"})
		d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
			ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("routes", "env", "prod", "version", "v1")}})
		resp := d.MustRecv()
		d.Ack(resp)
		if len(resp.GetResources()) != 1 || fromWrapper(t, resp.GetResources()[0]) != (got{"prod", "env=prod", true}) {
			t.Fatalf("delta client before the transition: %v", resp)
		}

		// (The relay answered from its cache; its own subscription with these
		// parameters reaches the upstream asynchronously.)
		xdstest.Eventually(t, func() bool {
			return slices.Contains(up.Subscriptions(resource.RouteType), "routes{env=prod&version=v1}")
		}, "upstream subscriptions", func() any { return up.Subscriptions(resource.RouteType) })

		withVersion := and(eq("env", "prod"), eq("version", "v1"))
		noVersion := and(eq("env", "prod"), not(exists("version")))
		up.Apply(resource.RouteType, []xdstest.VariantRef{{Name: "routes", Constraints: eq("env", "prod")}},
			[]xdstest.TP2Variant{{Name: "routes", Constraints: withVersion, Resource: routes("prod-v1")},
				{Name: "routes", Constraints: noVersion, Resource: routes("prod-unversioned")}})

		wantGot(t, "old client after", recvRoutes(t, old), got{"prod-unversioned", keying.CanonicalConstraints(noVersion), true})
		old.ExpectNoResponse(quiet)

		resp = d.MustRecv()
		d.Ack(resp)
		if len(resp.GetResources()) != 1 || fromWrapper(t, resp.GetResources()[0]) != (got{"prod-v1", keying.CanonicalConstraints(withVersion), true}) {
			t.Fatalf("delta client after the transition: %v", resp)
		}
		rm := resp.GetRemovedResourceNames()
		if len(rm) != 1 || rm[0].GetName() != "routes" || keying.CanonicalConstraints(rm[0].GetDynamicParameterConstraints()) != "env=prod" ||
			len(resp.GetRemovedResources()) != 0 {
			t.Fatalf("delta removals after the transition: %v / %v", rm, resp.GetRemovedResources())
		}
		d.ExpectNoResponse(quiet)
	})
}

// keying.dynamic_parameters_from_node: a client that cannot send locators
// gets the variant its node metadata selects, as a plain resource, and the
// relay subscribes upstream with those parameters.
func TestTP2ParametersFromNode(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
	up.Set(resource.RouteType, "routes", not(exists("env")), routes("default"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Keying = &config.Keying{DynamicParametersFromNode: map[string]string{"env": "metadata.env"}}
	}))

	md, err := structpb.NewStruct(map[string]any{"env": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy-prod", Metadata: md})
	envoy.Subscribe(resource.RouteType, "routes")
	wantGot(t, "prod node", recvRoutes(t, envoy), got{vh: "prod"})

	plain := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy-plain"})
	plain.Subscribe(resource.RouteType, "routes")
	wantGot(t, "node without env", recvRoutes(t, plain), got{vh: "default"})

	if subs := up.Subscriptions(resource.RouteType); !slices.Equal(subs, []string{"routes", "routes{env=prod}"}) {
		t.Fatalf("upstream subscriptions %v", subs)
	}
	clients := r.DebugClients("envoy-prod")
	if len(clients) != 1 || !slices.Equal(clients[0].Types[resource.RouteType].Names, []string{"routes{env=prod}"}) {
		t.Fatalf("/debug/clients: %+v", clients)
	}
}

// Several variants matching one subscription: the most specific is sent,
// whatever the order they arrived in, and the ambiguity is counted.
func TestTP2Ambiguity(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", and(eq("env", "prod"), exists("zone")), routes("specific"))
	r := xdstest.StartRelay(t, up.Addr())
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "a"})
	c.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod", "zone", "a"))
	wantGot(t, "first", recvRoutes(t, c), got{"specific", "and(env=prod,exists(zone))", true})

	// A second, less specific variant, which another client selects, also
	// matches the first client: it keeps the specific one.
	up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("broad"))
	c2 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b"})
	c2.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "prod"))
	wantGot(t, "second", recvRoutes(t, c2), got{"broad", "env=prod", true})
	c.ExpectNoResponse(quiet)
	xdstest.Eventually(t, func() bool { return counter(t, r, "xds_relay_tp2_ambiguous_matches_total") > 0 },
		"ambiguous matches not counted", nil)
}

// counter reads a counter family of the relay's registry (summed).
func counter(t *testing.T, r *xdstest.Relay, family string) float64 {
	t.Helper()
	fams, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == family {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TP3 per variant: an upstream error for a variant (resource_name with
// constraints) reaches the subscriptions whose parameters match it, and is
// replayed to a later subscriber with those parameters; others are served.
func TestTP2VariantErrors(t *testing.T) {
	addr := startFakeCDS(t, &fakeCDS{answer: func(names []string) (*discoverygrpc.DiscoveryResponse, error) {
		resp := &discoverygrpc.DiscoveryResponse{}
		for _, n := range names {
			switch n {
			case "c1{env=prod}":
				resp.ResourceErrors = append(resp.ResourceErrors, &discoverygrpc.ResourceError{
					ResourceName: &discoverygrpc.ResourceName{Name: "c1", DynamicParameterConstraints: eq("env", "prod")},
					ErrorDetail:  &status.Status{Code: int32(codes.NotFound), Message: "no prod c1"}})
			case "c1{env=test}":
				inner, err := anypb.New(xdstest.EDSCluster("c1", "eds-test"))
				if err != nil {
					return nil, err
				}
				a, err := anypb.New(&discoverygrpc.Resource{Resource: inner,
					ResourceName: &discoverygrpc.ResourceName{Name: "c1", DynamicParameterConstraints: eq("env", "test")}})
				if err != nil {
					return nil, err
				}
				resp.Resources = append(resp.Resources, a)
			}
		}
		return resp, nil
	}})
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	resp := prod.RecvType(resource.ClusterType)
	if got := errorsByName(resp); got["c1"] != codes.NotFound || len(resp.GetResources()) != 0 {
		t.Fatalf("prod: %v", resp)
	}

	test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
	test.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "test"))
	resp = test.RecvType(resource.ClusterType)
	for len(resp.GetResources()) == 0 {
		test.Ack(resp)
		resp = test.RecvType(resource.ClusterType)
	}
	if len(resp.GetResourceErrors()) != 0 || len(resp.GetResources()) != 1 {
		t.Fatalf("test: %v", resp)
	}

	late := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late-prod"})
	late.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	if got := errorsByName(late.RecvType(resource.ClusterType)); got["c1"] != codes.NotFound {
		t.Fatalf("replayed errors %v", got)
	}
}

// Locators mix with plain names, even for one name: each subscription gets
// its own variant, wrapped only for the locator.
func TestTP2MixedWithNames(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", eq("env", "test"), routes("test"))
	up.Set(resource.RouteType, "routes", not(exists("env")), routes("default"))
	r := xdstest.StartRelay(t, up.Addr())

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "mixed"})
	c.SubscribeLocators(resource.RouteType, []string{"routes"}, xdstest.Locator("routes", "env", "test"))
	var all []got
	for len(all) < 2 {
		all = append(all, recvRoutes(t, c)...)
	}
	slices.SortFunc(all, func(a, b got) int { return strings.Compare(a.vh, b.vh) })
	wantGot(t, "mixed", all, got{vh: "default"}, got{"test", "env=test", true})

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "mixed-delta"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{"routes"},
		ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("routes", "env", "test")}})
	var delta []got
	for len(delta) < 2 {
		resp := d.MustRecv()
		d.Ack(resp)
		for _, w := range resp.GetResources() {
			delta = append(delta, fromWrapper(t, w))
		}
	}
	slices.SortFunc(delta, func(a, b got) int { return strings.Compare(a.vh, b.vh) })
	wantGot(t, "mixed delta", delta, got{vh: "default"}, got{"test", "env=test", true})

	// Unsubscribing the locator leaves the plain name; nothing is sent.
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
		ResourceLocatorsUnsubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("routes", "env", "test")}})
	d.ExpectNoResponse(quiet)
	clients := r.DebugClients("mixed-delta")
	if len(clients) != 1 || !slices.Equal(clients[0].Types[resource.RouteType].Names, []string{"routes"}) {
		t.Fatalf("/debug/clients after the unsubscription: %+v", clients)
	}
}

// TP2 variants of a full-state type (CDS over SotW): a variant the upstream
// stops sending is gone for its subscribers, the others keep theirs.
func TestTP2FullStateVariants(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.ClusterType, "c1", eq("env", "prod"), xdstest.EDSCluster("c1", "eds-prod"))
	up.Set(resource.ClusterType, "c1", eq("env", "test"), xdstest.EDSCluster("c1", "eds-test"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = "sotw" }))

	recv := func(c *xdstest.ADSClient) []string {
		t.Helper()
		resp := c.RecvType(resource.ClusterType)
		c.Ack(resp)
		var out []string
		for _, a := range resp.GetResources() {
			w := &discoverygrpc.Resource{}
			if err := proto.Unmarshal(a.GetValue(), w); err != nil {
				t.Fatal(err)
			}
			out = append(out, edsNames(t, &discoverygrpc.DiscoveryResponse{Resources: []*anypb.Any{w.GetResource()}})["c1"])
		}
		return out
	}
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	if got := recv(prod); !slices.Equal(got, []string{"eds-prod"}) {
		t.Fatalf("prod: %v", got)
	}
	test := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
	test.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "test"))
	if got := recv(test); !slices.Equal(got, []string{"eds-test"}) {
		t.Fatalf("test: %v", got)
	}
	xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.ClusterType)) == 2 },
		"upstream subscriptions", func() any { return up.Subscriptions(resource.ClusterType) })

	up.Delete(resource.ClusterType, "c1", eq("env", "test"))
	if got := recv(test); len(got) != 0 {
		t.Fatalf("test after its variant was deleted: %v", got)
	}
	prod.ExpectNoResponse(quiet)
}

// A Delta client that reconnects with a TP2 subscription names the variant it
// holds in initial_resource_versions by its plain name: the relay takes it
// for the variant its locator selects, so the client is not sent it again
// (and not told it is gone when it is, while what it holds refers to it).
func TestTP2DeltaInitialVersions(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.Set(resource.RouteType, "routes", eq("env", "prod"), routes("prod"))
	r := xdstest.StartRelay(t, up.Addr())

	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	sub := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
		ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("routes", "env", "prod")}}
	first.Send(sub)
	resp := first.MustRecv()
	first.Ack(resp)
	if len(resp.GetResources()) != 1 {
		t.Fatalf("first response: %v", resp)
	}
	version := resp.GetResources()[0].GetVersion()

	again := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	again.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
		ResourceLocatorsSubscribe: sub.ResourceLocatorsSubscribe,
		InitialResourceVersions:   map[string]string{"routes": version}})
	again.ExpectNoResponse(quiet)
}

// A full-state SotW CDS response carries, for a name with no TP2 key, its
// default variant and then a constrained one (a server may send variants to
// a plain or wildcard subscriber, see upstream.matchKeys): the default went
// through the plain branch, the constrained one put the name in variant
// mode, and only it counted as sent — the full-state pruning dropped the
// default, and wildcard clients were told the name was gone (found by a
// review, pre-existing).
func TestVariantModeEnteredMidResponse(t *testing.T) {
	f, addr := startScripted(t)
	r := xdstest.StartRelay(t, addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "sotw"
	}))
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	s := f.stream(t)
	s.next(resource.ClusterType)
	s.send(resource.ClusterType, "1", xdstest.EDSCluster("c", "eds"))
	wild.Ack(wild.MustRecv())

	body, err := anypb.New(xdstest.EDSCluster("c", "eds-prod"))
	if err != nil {
		t.Fatal(err)
	}
	prod := &discoverygrpc.Resource{
		ResourceName: &discoverygrpc.ResourceName{Name: "c", DynamicParameterConstraints: eq("env", "prod")},
		Resource:     body,
	}
	s.send(resource.ClusterType, "2", xdstest.EDSCluster("c", "eds"), prod)
	refuseRemovals(t, wild, time.Now().Add(time.Second)) // the upstream sent c
}

// tp2Upstreams are the ways a TP2 upstream may delete a variant: a SotW full
// state without it, a Delta removed_resource_names, or (for one sent without
// constraints) a Delta removed_resources.
var tp2Upstreams = []struct {
	name          string
	protocol      string
	plainRemovals bool
}{{"sotw upstream", "sotw", false}, {"delta upstream", "delta", false}, {"delta upstream, removed_resources", "delta", true}}

// The xRFC's transition from an unconstrained resource: the server deletes
// the unconstrained variant (in removed_resource_names, or in
// removed_resources: it was sent without constraints) and creates its
// replacements in one response. Each subscriber is sent the replacement it
// selects, once (a Delta one also the removal of the unconstrained variant,
// in the same response), and the cache keeps both replacements.
func TestTP2TransitionFromUnconstrained(t *testing.T) {
	for _, c := range tp2Upstreams {
		t.Run(c.name, func(t *testing.T) { testTransitionFromUnconstrained(t, c.protocol, c.plainRemovals) })
	}
}

func testTransitionFromUnconstrained(t *testing.T, protocol string, plainRemovals bool) {
	up := xdstest.StartTP2(t)
	up.SetPlainRemovals(plainRemovals)
	up.Set(resource.RouteType, "routes", nil, routes("any"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = protocol }))

	sotw := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "test"})
	sotw.SubscribeLocators(resource.RouteType, nil, xdstest.Locator("routes", "env", "test"))
	wantGot(t, "sotw client before", recvRoutes(t, sotw), got{"any", "", true})

	d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "prod"})
	d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
		ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("routes", "env", "prod")}})
	resp := d.MustRecv()
	d.Ack(resp)
	if len(resp.GetResources()) != 1 || fromWrapper(t, resp.GetResources()[0]) != (got{"any", "", true}) {
		t.Fatalf("delta client before the transition: %v", resp)
	}
	xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.RouteType)) == 2 },
		"upstream subscriptions", func() any { return up.Subscriptions(resource.RouteType) })

	up.Apply(resource.RouteType, []xdstest.VariantRef{{Name: "routes"}},
		[]xdstest.TP2Variant{{Name: "routes", Constraints: eq("env", "prod"), Resource: routes("prod")},
			{Name: "routes", Constraints: eq("env", "test"), Resource: routes("test")}})

	resp = d.MustRecv()
	d.Ack(resp)
	if len(resp.GetResources()) != 1 || fromWrapper(t, resp.GetResources()[0]) != (got{"prod", "env=prod", true}) {
		t.Fatalf("delta client after the transition: %v", resp)
	}
	if rm := resp.GetRemovedResourceNames(); len(rm) != 1 || rm[0].GetName() != "routes" ||
		rm[0].GetDynamicParameterConstraints() != nil || len(resp.GetRemovedResources()) != 0 {
		t.Fatalf("delta removals after the transition: %v / %v", rm, resp.GetRemovedResources())
	}
	wantGot(t, "sotw client after", recvRoutes(t, sotw), got{"test", "env=test", true})
	// quiet suffices: a removal would follow the update at once.
	d.ExpectNoResponse(quiet)
	sotw.ExpectNoResponse(quiet)

	var cached []string
	for _, e := range r.DebugCache(relay.CacheFilter{Type: "RouteConfiguration"}) {
		if e.Subscribers > 0 {
			cached = append(cached, e.Constraints)
		}
	}
	if slices.Sort(cached); !slices.Equal(cached, []string{"env=prod", "env=test"}) {
		t.Fatalf("/debug/cache after the transition: %+v", r.DebugCache(relay.CacheFilter{Type: "RouteConfiguration"}))
	}
}

// The default variant of c1 deleted upstream while c1{env=prod} stays: by
// the upstream's word (a full state without it, a Delta removal) c1 is gone
// for its plain subscribers, whose no parameters match no remaining variant
// (xRFC TP2: the server acts as if it did not exist), and they are told so
// once — SotW by a full state without it, Delta by removed_resources — while
// the subscribers of env=prod keep theirs; when that variant goes too, they
// are told once.
func TestTP2DefaultVariantDeleted(t *testing.T) {
	for _, c := range tp2Upstreams {
		t.Run(c.name, func(t *testing.T) { testDefaultVariantDeleted(t, c.protocol, c.plainRemovals) })
	}
}

func testDefaultVariantDeleted(t *testing.T, protocol string, plainRemovals bool) {
	up := xdstest.StartTP2(t)
	up.SetPlainRemovals(plainRemovals)
	up.Set(resource.ClusterType, "c1", nil, xdstest.EDSCluster("c1", "eds-default"))
	up.Set(resource.ClusterType, "c1", eq("env", "prod"), xdstest.EDSCluster("c1", "eds-prod"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.XDSServers[0].Protocol = protocol }))

	plain := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "plain"})
	plain.Subscribe(resource.ClusterType, "c1")
	recvClusterCount(t, plain, "plain sotw client", 1)
	plainDelta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "plain-delta"})
	plainDelta.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	if resp := plainDelta.MustRecv(); len(resp.GetResources()) != 1 {
		t.Fatalf("plain delta client: %v", resp)
	} else {
		plainDelta.Ack(resp)
	}
	prod, prodDelta := subscribeProdC1(t, r)
	xdstest.Eventually(t, func() bool { return len(up.Subscriptions(resource.ClusterType)) == 2 },
		"upstream subscriptions", func() any { return up.Subscriptions(resource.ClusterType) })
	// quiet suffices for the checks below: a second removal, or one for
	// another client, would come with the first.
	quietAll := func() {
		t.Helper()
		plain.ExpectNoResponse(quiet)
		plainDelta.ExpectNoResponse(quiet)
		prod.ExpectNoResponse(quiet)
		prodDelta.ExpectNoResponse(quiet)
	}

	up.Delete(resource.ClusterType, "c1", nil)
	recvClusterCount(t, plain, "plain sotw client after the deletion", 0)
	resp := plainDelta.MustRecv()
	plainDelta.Ack(resp)
	if len(resp.GetResources()) != 0 || !slices.Equal(resp.GetRemovedResources(), []string{"c1"}) {
		t.Fatalf("plain delta client after the deletion: %v", resp)
	}
	quietAll()
	if cached := r.DebugCache(relay.CacheFilter{Type: "Cluster"}); len(cached) != 1 || cached[0].Constraints != "env=prod" {
		t.Fatalf("/debug/cache after the deletion: %+v", cached)
	}

	up.Delete(resource.ClusterType, "c1", eq("env", "prod"))
	recvClusterCount(t, prod, "prod sotw client after the deletion", 0)
	resp = prodDelta.MustRecv()
	prodDelta.Ack(resp)
	if rm := resp.GetRemovedResourceNames(); len(resp.GetResources()) != 0 || len(rm) != 1 || rm[0].GetName() != "c1" {
		t.Fatalf("prod delta client after the deletion: %v", resp)
	}
	quietAll()
}

// recvClusterCount receives and ACKs c's next CDS response, which must
// carry n resources.
func recvClusterCount(t *testing.T, c *xdstest.ADSClient, what string, n int) {
	t.Helper()
	resp := c.RecvType(resource.ClusterType)
	c.Ack(resp)
	if len(resp.GetResources()) != n {
		t.Fatalf("%s: %v", what, resp)
	}
}

// subscribeProdC1 subscribes a SotW and a Delta client to c1{env=prod} and
// waits until each holds its own variant (the cached default variant may
// come first).
func subscribeProdC1(t *testing.T, r *xdstest.Relay) (*xdstest.ADSClient, *xdstest.DeltaClient) {
	t.Helper()
	prod := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "prod"})
	prod.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
	for {
		resp := prod.RecvType(resource.ClusterType)
		prod.Ack(resp)
		w := &discoverygrpc.Resource{}
		if err := proto.Unmarshal(resp.GetResources()[0].GetValue(), w); err != nil {
			t.Fatal(err)
		}
		if w.GetResourceName().GetDynamicParameterConstraints() != nil {
			break
		}
	}
	prodDelta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "prod-delta"})
	prodDelta.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator("c1", "env", "prod")}})
	for {
		resp := prodDelta.MustRecv()
		prodDelta.Ack(resp)
		if len(resp.GetResources()) == 1 && resp.GetResources()[0].GetResourceName().GetDynamicParameterConstraints() != nil {
			return prod, prodDelta
		}
	}
}

// An xdstp name Envoy spells percent-encoded (".../svc%3A8080"), subscribed
// with TP2 parameters: the upstream, which matches names exactly, is asked
// for the name as the client wrote it, with its parameters, and the Delta
// client is answered, and told of the variant's deletion, in its spelling;
// a SotW client's resource_name is the upstream's spelling, like the bytes
// it wraps. (Plain names: TestEnvoySpelledXdstpName.)
func TestTP2EnvoySpelledLocator(t *testing.T) {
	const envoy = "xdstp://auth.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
	forProtocols(t, func(t *testing.T, protocol string) {
		up := xdstest.StartTP2(t)
		up.Set(resource.ClusterType, envoy, eq("env", "prod"), xdstest.EDSCluster(envoy, "eds-prod"))
		r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.XDSServers[0].Protocol = protocol
			c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
		}))

		d := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
		d.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
			ResourceLocatorsSubscribe: []*discoverygrpc.ResourceLocator{xdstest.Locator(envoy, "env", "prod")}})
		resp := d.MustRecv()
		d.Ack(resp)
		if rs := resp.GetResources(); len(rs) != 1 || rs[0].GetResourceName().GetName() != envoy ||
			keying.CanonicalConstraints(rs[0].GetResourceName().GetDynamicParameterConstraints()) != "env=prod" {
			t.Fatalf("delta client: %v", resp)
		}
		if subs := up.Subscriptions(resource.ClusterType); !slices.Equal(subs, []string{envoy + "{env=prod}"}) {
			t.Fatalf("upstream subscriptions %v", subs)
		}

		// A SotW response is one encoding for all its clients.
		s := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "sotw"})
		s.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator(envoy, "env", "prod"))
		sresp := s.RecvType(resource.ClusterType)
		s.Ack(sresp)
		w := &discoverygrpc.Resource{}
		if rs := sresp.GetResources(); len(rs) != 1 || proto.Unmarshal(rs[0].GetValue(), w) != nil || w.GetResourceName().GetName() != envoy {
			t.Fatalf("sotw client: %v", sresp)
		}

		up.Delete(resource.ClusterType, envoy, eq("env", "prod"))
		resp = d.MustRecv()
		d.Ack(resp)
		if rm := resp.GetRemovedResourceNames(); len(resp.GetResources()) != 0 || len(rm) != 1 || rm[0].GetName() != envoy {
			t.Fatalf("delta client after the deletion: %v", resp)
		}
	})
}

// A SotW CDS client from another replica names c1 plainly while c1 is in
// variant mode (another client subscribes c1{env=prod}) and the upstream has
// no default variant: once the Delta upstream says c1 is gone
// (removed_resources, asked on a new stream), the client is answered the
// rest of its set. Held until the relay has the upstream's word on c1, it
// would wait for good (soak seed 371137).
func TestTP2PlainNameGoneInVariantModeAnswersClientFromElsewhere(t *testing.T) {
	up := xdstest.StartTP2(t)
	up.SetPlainRemovals(true)
	up.Set(resource.ClusterType, "c0", nil, xdstest.EDSCluster("c0", "eds-c0"))
	up.Set(resource.ClusterType, "c1", eq("env", "prod"), xdstest.EDSCluster("c1", "eds-prod"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	subscribeProdC1(t, r)

	moved := xdstest.DialSotW(t, r.Addr(), &core.Node{Id: "moved"}, resource.ClusterType)
	moved.MustSend(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v-elsewhere",
		ResourceNames: []string{"c0", "c1"}})
	wantNames(t, moved.RecvType(resource.ClusterType), "c0")
}
