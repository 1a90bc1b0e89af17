package keying_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/keying"
)

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGroupProjection(t *testing.T) {
	base := &corev3.Node{Id: "relay", Cluster: "relay-cluster",
		Metadata: mustStruct(t, map[string]any{"role": "relay"})}
	client := &corev3.Node{Id: "envoy-1", Cluster: "web",
		Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"},
		Metadata: mustStruct(t, map[string]any{"env": "prod", "shard": 3.0})}
	for _, tc := range []struct {
		name     string
		fields   []string
		client   *corev3.Node
		wantKey  string
		wantNode *corev3.Node // nil: no group (the shared scope)
	}{
		{name: "no group_by", client: client},
		{name: "cluster", fields: []string{"cluster"}, client: client, wantKey: "cluster=web",
			wantNode: &corev3.Node{Id: "relay/cluster=web", Cluster: "web",
				Metadata: mustStruct(t, map[string]any{"role": "relay"})}},
		{name: "locality and metadata", fields: []string{"locality.region", "locality.sub_zone", "locality.zone", "metadata.env", "metadata.shard"},
			client:  client,
			wantKey: "locality.region=eu,locality.sub_zone=,locality.zone=eu-1a,metadata.env=prod,metadata.shard=3",
			wantNode: &corev3.Node{Id: "relay/locality.region=eu,locality.sub_zone=,locality.zone=eu-1a,metadata.env=prod,metadata.shard=3",
				Cluster:  "relay-cluster",
				Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"},
				Metadata: mustStruct(t, map[string]any{"role": "relay", "env": "prod", "shard": 3.0})}},
		{name: "absent metadata key", fields: []string{"metadata.missing"}, client: client, wantKey: "metadata.missing=",
			wantNode: &corev3.Node{Id: "relay/metadata.missing=", Cluster: "relay-cluster",
				Metadata: mustStruct(t, map[string]any{"role": "relay"})}},
		{name: "id and an unknown field", fields: []string{"id", "nonsense"}, client: client, wantKey: "id=envoy-1,nonsense=",
			wantNode: &corev3.Node{Id: "relay/id=envoy-1,nonsense=", Cluster: "relay-cluster",
				Metadata: mustStruct(t, map[string]any{"role": "relay"})}},
		{name: "nil client", fields: []string{"cluster", "locality.zone"}, wantKey: "cluster=,locality.zone=",
			wantNode: &corev3.Node{Id: "relay/cluster=,locality.zone=", Locality: &corev3.Locality{},
				Metadata: mustStruct(t, map[string]any{"role": "relay"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := keying.GroupKey(tc.fields, tc.client)
			if key != tc.wantKey {
				t.Fatalf("GroupKey = %q, want %q", key, tc.wantKey)
			}
			if tc.wantNode == nil {
				return
			}
			got := keying.GroupNode(base, tc.fields, tc.client, key)
			if diff := cmp.Diff(tc.wantNode, got, protocmp.Transform()); diff != "" {
				t.Errorf("GroupNode (-want +got):\n%s", diff)
			}
		})
	}
	if base.GetId() != "relay" || len(base.GetMetadata().GetFields()) != 1 {
		t.Errorf("GroupNode changed its base node: %v", base)
	}
}

func TestLookupNodeField(t *testing.T) {
	node := &corev3.Node{Id: "n", Locality: &corev3.Locality{Zone: "z"},
		Metadata: mustStruct(t, map[string]any{"s": "v", "empty": "", "n": 1.5, "b": true})}
	type result struct {
		V  string
		OK bool
	}
	for field, want := range map[string]result{
		"id":               {"n", true},
		"cluster":          {"", false}, // an empty string field is absent
		"locality.zone":    {"z", true},
		"locality.region":  {"", false},
		"metadata.s":       {"v", true},
		"metadata.empty":   {"", true}, // a present metadata key is there, even empty
		"metadata.n":       {"1.5", true},
		"metadata.b":       {"true", true},
		"metadata.missing": {"", false},
		"other":            {"", false},
	} {
		v, ok := keying.LookupNodeField(node, field)
		if diff := cmp.Diff(want, result{v, ok}); diff != "" {
			t.Errorf("LookupNodeField(%q) (-want +got):\n%s", field, diff)
		}
	}
}
