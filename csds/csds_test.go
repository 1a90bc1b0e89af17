package csds_test

import (
	"context"
	"strings"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is a relay in front of a go-control-plane upstream with two
// clusters and their endpoints, and a grpc-go CSDS client of the relay.
type fleet struct {
	*xdstest.Relay
	csds statusv3.ClientStatusDiscoveryServiceClient
}

func startFleet(t *testing.T, opts ...xdstest.RelayOption) *fleet {
	t.Helper()
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{
		resource.ClusterType:  {xdstest.EDSCluster("c1", "e1"), xdstest.EDSCluster("c2", "e2")},
		resource.EndpointType: {xdstest.Endpoints("e1", "127.0.0.1:1"), xdstest.Endpoints("e2", "127.0.0.1:2")},
	})
	r := xdstest.StartRelay(t, up.Addr(), opts...)
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &fleet{Relay: r, csds: statusv3.NewClientStatusDiscoveryServiceClient(conn)}
}

func node(id, zone string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"zone": zone, "tier": map[string]any{"level": 2.0}})
	return &core.Node{Id: id, Cluster: "edge", Metadata: md}
}

func (f *fleet) fetch(t *testing.T, ms ...*matcherv3.NodeMatcher) *statusv3.ClientStatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	resp, err := f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: ms})
	if err != nil {
		t.Fatalf("FetchClientStatus: %v", err)
	}
	return resp
}

// gen is one expected GenericXdsConfig.
type gen = statusv3.ClientConfig_GenericXdsConfig

// sameConfigs compares GenericXdsConfigs but their last_updated (always
// zero: TestReadAsGrpcdebugDoes checks it is there).
var sameConfigs = cmp.Options{protocmp.Transform(), protocmp.IgnoreFields(&gen{}, "last_updated")}

// wantConfigs checks the response: one ClientConfig per node id in order,
// each with exactly the given entries.
func wantConfigs(t *testing.T, resp *statusv3.ClientStatusResponse, want map[string][]*gen, order ...string) {
	t.Helper()
	if len(resp.GetConfig()) != len(order) {
		t.Fatalf("%d client configs, want %d: %v", len(resp.GetConfig()), len(order), resp)
	}
	for i, cc := range resp.GetConfig() {
		id := cc.GetNode().GetId()
		if id != order[i] || cc.GetClientScope() != id {
			t.Fatalf("config %d is node %q scope %q, want %q", i, id, cc.GetClientScope(), order[i])
		}
		if d := cmp.Diff(want[id], cc.GetGenericXdsConfigs(), sameConfigs); d != "" {
			t.Errorf("node %s configs (-want +got):\n%s", id, d)
		}
	}
}

// CSDS reports each client of the fleet with its node and one entry per
// resource it holds or asks for by name — never "*" — with the version it
// holds, its state of it and, unless excluded, the resource as it received
// it; over SotW and Delta, and with the same version for the same resource.
func TestFetchReportsEveryClient(t *testing.T) {
	f := startFleet(t)

	a := xdstest.DialADS(t, f.Addr(), node("envoy-a", "a")) // SotW wildcard CDS
	a.Subscribe(resource.ClusterType)
	ra := a.RecvType(resource.ClusterType)

	b := xdstest.DialDelta(t, f.Addr(), node("envoy-b", "b")) // Delta CDS c1, c2 and EDS e1, ACKed
	b.Subscribe(resource.ClusterType, []string{"c1", "c2"}, nil)
	held := map[string]*discoverygrpc.Resource{}
	for len(held) < 2 {
		rb := b.MustRecv()
		for _, r := range rb.GetResources() {
			held[r.GetName()] = r
		}
		b.Ack(rb)
	}
	b.Subscribe(resource.EndpointType, []string{"e1"}, nil)
	rb := b.MustRecv()
	b.Ack(rb)
	held["e1"] = rb.GetResources()[0]

	c := xdstest.DialADS(t, f.Addr(), node("envoy-c", "a")) // SotW CDS, its first response NACKed
	c.Subscribe(resource.ClusterType)
	rc := c.RecvType(resource.ClusterType)
	c.Nack(rc, "cluster c2 rejected")

	d := xdstest.DialADS(t, f.Addr(), node("envoy-d", "b")) // EDS of a name nobody has
	d.Subscribe(resource.EndpointType, "e9")

	e := xdstest.DialADS(t, f.Addr(), node("envoy-e", "b")) // CDS c9, which the complete wildcard set lacks
	e.Subscribe(resource.ClusterType, "c9")
	e.Ack(e.RecvType(resource.ClusterType))

	synced := func(typeURL, name string, content *anypb.Any) *gen {
		return &gen{TypeUrl: typeURL, Name: name, VersionInfo: held[name].GetVersion(), XdsConfig: content,
			ConfigStatus: statusv3.ConfigStatus_SYNCED, ClientStatus: adminv3.ClientResourceStatus_ACKED}
	}
	nacked := func(name string) *gen {
		return &gen{TypeUrl: resource.ClusterType, Name: name, ConfigStatus: statusv3.ConfigStatus_ERROR,
			ClientStatus: adminv3.ClientResourceStatus_NACKED,
			ErrorState:   &adminv3.UpdateFailureState{Details: "cluster c2 rejected", VersionInfo: held[name].GetVersion()}}
	}
	// envoy-a has not ACKed its first response yet: it holds nothing of it.
	pending := func(name string) *gen {
		return &gen{TypeUrl: resource.ClusterType, Name: name, ConfigStatus: statusv3.ConfigStatus_STALE,
			ClientStatus: adminv3.ClientResourceStatus_REQUESTED}
	}
	want := map[string][]*gen{
		"envoy-a": {pending("c1"), pending("c2")},
		"envoy-b": {synced(resource.ClusterType, "c1", held["c1"].GetResource()), synced(resource.ClusterType, "c2", held["c2"].GetResource()),
			synced(resource.EndpointType, "e1", held["e1"].GetResource())},
		"envoy-c": {nacked("c1"), nacked("c2")},
		"envoy-d": {{TypeUrl: resource.EndpointType, Name: "e9", ConfigStatus: statusv3.ConfigStatus_NOT_SENT,
			ClientStatus: adminv3.ClientResourceStatus_REQUESTED}},
		"envoy-e": {{TypeUrl: resource.ClusterType, Name: "c9", ConfigStatus: statusv3.ConfigStatus_NOT_SENT,
			ClientStatus: adminv3.ClientResourceStatus_DOES_NOT_EXIST}},
	}
	all := []string{"envoy-a", "envoy-b", "envoy-c", "envoy-d", "envoy-e"}
	xdstest.Eventually(t, func() bool {
		resp := f.fetch(t)
		return len(resp.GetConfig()) == 5 && cmp.Equal(want["envoy-c"], resp.GetConfig()[2].GetGenericXdsConfigs(), sameConfigs) &&
			cmp.Equal(want["envoy-e"], resp.GetConfig()[4].GetGenericXdsConfigs(), sameConfigs)
	}, "every client and the NACK reported", func() any { return f.fetch(t) })
	resp := f.fetch(t)
	wantConfigs(t, resp, want, all...)
	if !cmp.Equal(resp.GetConfig()[0].GetNode(), node("envoy-a", "a"), protocmp.Transform()) {
		t.Errorf("node %v, want the client's own", resp.GetConfig()[0].GetNode())
	}

	a.Ack(ra) // now each cluster SYNCED, at the version envoy-b holds, as envoy-a received it
	want["envoy-a"] = []*gen{synced(resource.ClusterType, "c1", named(t, ra.GetResources(), "c1")),
		synced(resource.ClusterType, "c2", named(t, ra.GetResources(), "c2"))}
	xdstest.Eventually(t, func() bool {
		return cmp.Equal(want["envoy-a"], f.fetch(t).GetConfig()[0].GetGenericXdsConfigs(), sameConfigs)
	}, "envoy-a SYNCED after its ACK", func() any { return f.fetch(t).GetConfig()[0] })

	// Without contents when asked so.
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	lean, err := f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range lean.GetConfig() {
		for _, g := range cc.GetGenericXdsConfigs() {
			if g.GetXdsConfig() != nil {
				t.Errorf("exclude_resource_contents: %s has contents", g.GetName())
			}
		}
	}

	// A client that leaves is no longer reported.
	d.Close()
	xdstest.Eventually(t, func() bool { return len(f.fetch(t).GetConfig()) == 4 }, "envoy-d gone", nil)
	wantConfigs(t, f.fetch(t), want, "envoy-a", "envoy-b", "envoy-c", "envoy-e")
}

// named returns the resource of anys whose name (a ClusterLoadAssignment's
// cluster_name) is name.
func named(t *testing.T, anys []*anypb.Any, name string) *anypb.Any {
	t.Helper()
	for _, a := range anys {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch r := m.(type) {
		case interface{ GetName() string }:
			if r.GetName() == name {
				return a
			}
		case interface{ GetClusterName() string }:
			if r.GetClusterName() == name {
				return a
			}
		}
	}
	t.Fatalf("no resource %s in %v", name, anys)
	return nil
}

// node_matchers select clients by id and by metadata; a matcher the relay
// cannot evaluate is refused, not ignored.
func TestNodeMatchers(t *testing.T) {
	f := startFleet(t)
	for _, n := range []*core.Node{node("envoy-a", "a"), node("envoy-b", "b"), node("gw-a", "a")} {
		c := xdstest.DialADS(t, f.Addr(), n)
		c.Subscribe(resource.ClusterType)
		c.Ack(c.RecvType(resource.ClusterType))
	}
	xdstest.Eventually(t, func() bool { return len(f.fetch(t).GetConfig()) == 3 }, "three clients", nil)

	str := func(m *matcherv3.StringMatcher) *matcherv3.ValueMatcher {
		return &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}}
	}
	exact := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
	}
	path := func(keys ...string) []*matcherv3.StructMatcher_PathSegment {
		var out []*matcherv3.StructMatcher_PathSegment
		for _, k := range keys {
			out = append(out, &matcherv3.StructMatcher_PathSegment{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: k}})
		}
		return out
	}
	tests := []struct {
		name string
		ms   []*matcherv3.NodeMatcher
		want []string
	}{
		{"id prefix", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "ENVOY-"}, IgnoreCase: true}}}, []string{"envoy-a", "envoy-b"}},
		{"id regex", []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*-a"}}}}},
			[]string{"envoy-a", "gw-a"}},
		{"metadata", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			{Path: path("zone"), Value: str(exact("a"))}}}}, []string{"envoy-a", "gw-a"}},
		{"id and metadata", []*matcherv3.NodeMatcher{{NodeId: exact("gw-a"), NodeMetadatas: []*matcherv3.StructMatcher{
			{Path: path("zone"), Value: str(exact("a"))}}}}, []string{"gw-a"}},
		{"nested number range", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			{Path: path("tier", "level"), Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_DoubleMatch{
				DoubleMatch: &matcherv3.DoubleMatcher{MatchPattern: &matcherv3.DoubleMatcher_Exact{Exact: 2}}}}}}}},
			[]string{"envoy-a", "envoy-b", "gw-a"}},
		{"absent key", []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{
			{Path: path("region"), Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}}}}}},
			nil},
		{"any of two", []*matcherv3.NodeMatcher{{NodeId: exact("envoy-b")}, {NodeId: exact("gw-a")}}, []string{"envoy-b", "gw-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, cc := range f.fetch(t, tt.ms...).GetConfig() {
				got = append(got, cc.GetNode().GetId())
			}
			if !cmp.Equal(got, tt.want) {
				t.Errorf("matched %v, want %v", got, tt.want)
			}
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	_, err := f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "("}}}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_matchers[0].node_id: safe_regex") {
		t.Errorf("bad regex: %v, want InvalidArgument naming it", err)
	}
}

// StreamClientStatus answers every request of the stream, each with its own
// filter.
func TestStreamClientStatus(t *testing.T) {
	f := startFleet(t)
	for _, id := range []string{"envoy-a", "envoy-b"} {
		c := xdstest.DialADS(t, f.Addr(), node(id, "a"))
		c.Subscribe(resource.ClusterType)
		c.Ack(c.RecvType(resource.ClusterType))
	}
	xdstest.Eventually(t, func() bool { return len(f.fetch(t).GetConfig()) == 2 }, "two clients", nil)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	st, err := f.csds.StreamClientStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"envoy-b", "envoy-a"} {
		if err := st.Send(&statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
			NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: want}}}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetConfig()) != 1 || resp.GetConfig()[0].GetNode().GetId() != want {
			t.Fatalf("stream answer %v, want %s only", resp, want)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("the stream did not end after CloseSend")
	}
}

// CSDS is behind the xDS authorization: a caller no rule allows
// ClientConfig is refused; one that is allowed sees only the entries it
// could subscribe to itself (secrets' names need mTLS by default).
func TestAuthorization(t *testing.T) {
	f := startFleet(t, xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{AllowSecretsWithoutMTLS: false, Rules: []config.AuthzRule{
			{Nodes: []string{"envoy-*"}, Types: []string{"Cluster", "Secret"}},
			{Nodes: []string{"ops"}, Types: []string{"ClientConfig", "Cluster", "Secret"}},
		}}
	}))
	c := xdstest.DialADS(t, f.Addr(), node("envoy-a", "a"))
	c.Subscribe(resource.ClusterType)
	c.Ack(c.RecvType(resource.ClusterType))
	c.Subscribe(resource.SecretType, "server-cert") // denied over plaintext, still a subscription

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	_, err := f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{Node: &core.Node{Id: "envoy-b"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an Envoy reading CSDS: %v, want PermissionDenied", err)
	}
	var resp *statusv3.ClientStatusResponse
	xdstest.Eventually(t, func() bool {
		resp, err = f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{Node: &core.Node{Id: "ops"}})
		return err == nil && len(resp.GetConfig()) == 1 && len(f.DebugClients("envoy-a")[0].Types) == 2
	}, "ops reads CSDS", func() any { return err })
	resp, _ = f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{Node: &core.Node{Id: "ops"}})
	for _, g := range resp.GetConfig()[0].GetGenericXdsConfigs() {
		if g.GetTypeUrl() == resource.SecretType {
			t.Errorf("a plaintext caller sees the secret entry %v", g)
		}
	}
	if n := len(resp.GetConfig()[0].GetGenericXdsConfigs()); n != 2 {
		t.Errorf("%d entries, want the two clusters'", n)
	}
}
