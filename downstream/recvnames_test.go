package downstream

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
)

// grpcACK is an ACK as a gRPC client sends it: node, 100 names.
func grpcACK(typeURL, version string, n int) *discoverypb.DiscoveryRequest {
	req := &discoverypb.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: version, ResponseNonce: version,
		Node: &corev3.Node{Id: "client-1", Cluster: "svc"}}
	for i := range n {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("cluster-%04d", i))
	}
	return req
}

// splitAtNames returns m's encoding around its resource_names fields.
func splitAtNames(m proto.Message) (prefix, names, suffix []byte) {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	i, j, ok := namesSpan(b)
	if !ok {
		return b, nil, nil
	}
	return b[:i], b[i:j], b[j:]
}

// decodeBoth decodes b with the memo and with proto.Unmarshal and fails the
// test unless both give the same request or the same error.
func decodeBoth(t *testing.T, memo *namesMemo, b []byte) {
	t.Helper()
	got := &sotwRequest{DiscoveryRequest: new(discoverypb.DiscoveryRequest), memo: memo}
	gotErr := got.unmarshal(b)
	want := new(discoverypb.DiscoveryRequest)
	wantErr := proto.Unmarshal(b, want)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("error %v, proto.Unmarshal's %v", gotErr, wantErr)
	}
	if gotErr == nil && !proto.Equal(got.DiscoveryRequest, want) {
		t.Fatalf("decoded %v, proto.Unmarshal %v", got.DiscoveryRequest, want)
	}
}

// FuzzSotWRequestDecode checks that decoding with a names memo gives what
// proto.Unmarshal gives, for two requests that carry the same names bytes
// amid anything.
func FuzzSotWRequestDecode(f *testing.F) {
	cds, eds := grpcACK(keying.ClusterType, "1", 100), grpcACK(keying.EndpointType, "2", 100)
	p1, n1, s1 := splitAtNames(cds)
	p2, _, s2 := splitAtNames(eds)
	f.Add(p1, n1, s1, p1, s1)
	f.Add(p1, n1, s1, p2, s2)
	nack := grpcACK(keying.ClusterType, "1", 3)
	nack.ErrorDetail = &status.Status{Code: 3, Message: "bad"}
	p3, n3, s3 := splitAtNames(nack)
	f.Add(p3, n3, s3, p3, append(s3, 0x1a, 0x01, 'x')) // names split by other fields
	f.Add(p3, n3, s3, append(p3, 0x18, 0x01), s3)      // field 3 as a varint
	bad := protowire.AppendString(protowire.AppendTag(nil, namesField, protowire.BytesType), "\xff")
	f.Add(p3, bad, s3, p3, s3)                                                 // invalid UTF-8
	f.Add(p3, n3[:5], s3, p3, s3)                                              // truncated
	f.Add([]byte(nil), n3, []byte(nil), []byte{0xa2, 0x06, 0x00}, []byte(nil)) // unknown field
	f.Fuzz(func(t *testing.T, prefix1, names, suffix1, prefix2, suffix2 []byte) {
		memo := &namesMemo{table: new(namesTable)}
		m1 := append(append(append([]byte(nil), prefix1...), names...), suffix1...)
		m2 := append(append(append([]byte(nil), prefix2...), names...), suffix2...)
		for _, b := range [][]byte{m1, m2, m1, m2} {
			decodeBoth(t, memo, b)
		}
	})
}

// TestSotWRequestNamesShared checks that an ACK repeating its type's names
// reuses them, shared between streams, and that an append cannot write into
// them.
func TestSotWRequestNamesShared(t *testing.T) {
	table := new(namesTable)
	a, b := &namesMemo{table: table}, &namesMemo{table: table}
	enc, _ := proto.Marshal(grpcACK(keying.ClusterType, "1", 100))
	enc2, _ := proto.Marshal(grpcACK(keying.ClusterType, "2", 100))
	var got [3]*sotwRequest
	for i, d := range []struct {
		memo *namesMemo
		b    []byte
	}{{a, enc}, {a, enc2}, {b, enc2}} {
		got[i] = &sotwRequest{DiscoveryRequest: new(discoverypb.DiscoveryRequest), memo: d.memo}
		if err := got[i].unmarshal(d.b); err != nil {
			t.Fatal(err)
		}
	}
	if got[1].GetVersionInfo() != "2" || &got[1].ResourceNames[0] != &got[0].ResourceNames[0] ||
		&got[2].ResourceNames[0] != &got[0].ResourceNames[0] {
		t.Fatalf("names not reused: %v", got[1].DiscoveryRequest)
	}
	if names := got[0].ResourceNames; cap(names) != len(names) {
		t.Fatalf("shared names have spare capacity %d > %d", cap(names), len(names))
	}
}
