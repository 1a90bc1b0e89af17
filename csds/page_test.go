package csds

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// fleetSnapshot is a Snapshot of n SotW clients "node-000"…, each
// subscribed to every cluster and synced.
type fleetSnapshot struct{ n int }

func (f fleetSnapshot) Refs() []downstream.StreamRef {
	out := make([]downstream.StreamRef, f.n)
	for i := range out {
		out[i] = downstream.StreamRef{ID: uint64(i + 1), Node: &corev3.Node{Id: fmt.Sprintf("node-%03d", i)}, Peer: "127.0.0.1:1"}
	}
	return out
}

func (f fleetSnapshot) ClientStates(ids []uint64) []downstream.ClientState {
	out := make([]downstream.ClientState, 0, len(ids))
	for _, id := range ids {
		out = append(out, downstream.ClientState{ID: id, Types: map[string]downstream.ClientTypeState{
			keying.ClusterType: {Wildcard: true, SentVersion: "v1", AckedVersion: "v1",
				Holds: map[string]downstream.HeldResource{"c1": {Version: "r1", Any: clusterAny}}},
		}})
	}
	return out
}

// clusterAny is a serialized Any of about 1 KiB.
var clusterAny, _ = proto.Marshal(&anypb.Any{TypeUrl: keying.ClusterType, Value: make([]byte, 1000)})

// Resource contents are bounded per answer: past MaxContentBytes, entries
// carry none and the answer says so.
func TestContentsBounded(t *testing.T) {
	srv := New(fleetSnapshot{n: 25}, Options{MaxContentBytes: 10 << 10})
	resp, _, _, cut, err := srv.answer(context.Background(), &statusv3.ClientStatusRequest{}, "")
	if err != nil {
		t.Fatal(err)
	}
	with := 0
	for _, cc := range resp.GetConfig() {
		for _, g := range cc.GetGenericXdsConfigs() {
			if g.GetXdsConfig() != nil {
				with++
			}
		}
	}
	if !cut || with == 0 || with*len(clusterAny) > 10<<10 {
		t.Errorf("%d of 25 entries with contents, cut %v: want some, within 10 KiB, and cut", with, cut)
	}
	resp, _, _, cut, _ = srv.answer(context.Background(), &statusv3.ClientStatusRequest{ExcludeResourceContents: true}, "")
	if cut || resp.GetConfig()[0].GetGenericXdsConfigs()[0].GetXdsConfig() != nil {
		t.Errorf("exclude_resource_contents: contents sent (cut %v)", cut)
	}
}

// Answers are bounded: FetchClientStatus pages through a fleet larger than
// MaxClients with the page token, every client exactly once, in order.
func TestPaging(t *testing.T) {
	srv := New(fleetSnapshot{n: 25}, Options{MaxClients: 10})
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := statusv3.NewClientStatusDiscoveryServiceClient(conn)

	var seen []string
	token := ""
	for page := 0; ; page++ {
		ctx := context.Background()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, PageTokenHeader, token)
		}
		var hdr metadata.MD
		resp, err := client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{}, grpc.Header(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		if got := hdr.Get(TotalHeader); len(got) != 1 || got[0] != "25" {
			t.Errorf("page %d: %s = %v, want 25", page, TotalHeader, got)
		}
		if len(resp.GetConfig()) > 10 {
			t.Fatalf("page %d holds %d clients, over the bound", page, len(resp.GetConfig()))
		}
		for _, cc := range resp.GetConfig() {
			seen = append(seen, cc.GetNode().GetId())
		}
		next := hdr.Get(NextPageHeader)
		if len(next) == 0 {
			break
		}
		token = next[0]
	}
	if len(seen) != 25 {
		t.Fatalf("paged through %d clients, want 25: %v", len(seen), seen)
	}
	for i, id := range seen {
		if id != fmt.Sprintf("node-%03d", i) {
			t.Fatalf("client %d is %s: out of order or repeated", i, id)
		}
	}
	_, err = client.FetchClientStatus(metadata.AppendToOutgoingContext(context.Background(), PageTokenHeader, "%%%"),
		&statusv3.ClientStatusRequest{})
	if err == nil {
		t.Error("a malformed page token was accepted")
	}
}

// Compiling and evaluating any node matcher never panics.
func FuzzNodeMatcher(f *testing.F) {
	seed := &matcherv3.NodeMatcher{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "a.*"}}},
		NodeMetadatas: []*matcherv3.StructMatcher{{
			Path: []*matcherv3.StructMatcher_PathSegment{{Segment: &matcherv3.StructMatcher_PathSegment_Key{Key: "k"}}},
			Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
				ValueMatchers: []*matcherv3.ValueMatcher{
					{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}},
					{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
						MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: &matcherv3.ValueMatcher{
							MatchPattern: &matcherv3.ValueMatcher_NullMatch_{NullMatch: &matcherv3.ValueMatcher_NullMatch{}}}}}}},
				}}}},
		}},
	}
	b, _ := proto.Marshal(seed)
	f.Add(b, "abc")
	f.Fuzz(func(t *testing.T, b []byte, id string) {
		m := &matcherv3.NodeMatcher{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		ms, err := compileNodeMatchers([]*matcherv3.NodeMatcher{m})
		if err != nil {
			return
		}
		md, _ := structpb.NewStruct(map[string]any{"k": []any{nil, 1.5, "x"}, "n": map[string]any{"k": true}, "id": id,
			"len": strconv.Itoa(len(id))})
		matchAny(ms, &corev3.Node{Id: id, Metadata: md})
	})
}
