package gateway

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// What the relay sends — a pre-encoded body and a nonce field after it —
// decodes as the generated DiscoveryResponse / DeltaDiscoveryResponse, with
// the upstream's snapshot and resources byte for byte.
func TestEncodedBodies(t *testing.T) {
	snap := &controlv1.ConfigSnapshot{Id: "s", Listeners: []*controlv1.Listener{{Name: "l", Port: 80}}}
	sb, _ := proto.Marshal(snap)
	body := encodeSnapshotBody("v7", sb)
	body = protowire.AppendTag(body, respNonce, protowire.BytesType)
	body = protowire.AppendString(body, "42")
	var resp controlv1.DiscoveryResponse
	if err := proto.Unmarshal(body, &resp); err != nil || resp.GetVersion() != "v7" || resp.GetNonce() != "42" || !proto.Equal(resp.GetSnapshot(), snap) {
		t.Fatalf("SotW body decodes to %v (%v)", &resp, err)
	}
	parsed, err := parseResponse(body)
	if err != nil || parsed.version != "v7" || parsed.nonce != "42" || !bytes.Equal(parsed.snapshot, sb) {
		t.Fatalf("parseResponse = %+v, %v", parsed, err)
	}

	res := &controlv1.Resource{Name: "l/80", Version: "h1", Resource: &anypb.Any{TypeUrl: controlv1.ListenerType, Value: []byte{10, 1, 'l'}}}
	rb, _ := proto.Marshal(res)
	r, anyType, err := parseResource(rb)
	if err != nil || r.name != "l/80" || r.version != "h1" || anyType != controlv1.ListenerType {
		t.Fatalf("parseResource = %+v %q %v", r, anyType, err)
	}
	db := encodeDeltaBody("sys", controlv1.ListenerType, []*resource{r}, []string{"gone/1"})
	db = protowire.AppendTag(db, deltaNonce, protowire.BytesType)
	db = protowire.AppendString(db, "7")
	var dresp controlv1.DeltaDiscoveryResponse
	if err := proto.Unmarshal(db, &dresp); err != nil || dresp.GetSystemVersionInfo() != "sys" || dresp.GetNonce() != "7" ||
		dresp.GetTypeUrl() != controlv1.ListenerType || len(dresp.GetResources()) != 1 || !proto.Equal(dresp.GetResources()[0], res) ||
		strings.Join(dresp.GetRemovedResources(), ",") != "gone/1" {
		t.Fatalf("Delta body decodes to %v (%v)", &dresp, err)
	}
}

// Malformed upstream responses are refused with a reason (and NACKed).
func TestParseErrors(t *testing.T) {
	good := &controlv1.Resource{Name: "a", Version: "1", Resource: &anypb.Any{TypeUrl: controlv1.ListenerType}}
	other := &controlv1.Resource{Name: "b", Version: "1", Resource: &anypb.Any{TypeUrl: controlv1.BackendClusterType}}
	enc := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	for name, tt := range map[string]struct {
		b    []byte
		want string
	}{
		"sotw no version":   {enc(&controlv1.DiscoveryResponse{Nonce: "1"}), "no version"},
		"sotw truncated":    {enc(&controlv1.DiscoveryResponse{Version: "v"})[:2], "unexpected EOF"},
		"sotw bad snapshot": {append(protowire.AppendTag(nil, respSnapshot, protowire.BytesType), 2, 0xff, 0xff), ""},
		"delta no type":     {enc(&controlv1.DeltaDiscoveryResponse{Nonce: "1"}), "no type_url"},
		"delta unnamed":     {enc(&controlv1.DeltaDiscoveryResponse{TypeUrl: controlv1.ListenerType, Resources: []*controlv1.Resource{{Version: "1"}}}), "without a name"},
		"delta no version":  {enc(&controlv1.DeltaDiscoveryResponse{TypeUrl: controlv1.ListenerType, Resources: []*controlv1.Resource{{Name: "a"}}}), "without a version"},
		"delta wrong type":  {enc(&controlv1.DeltaDiscoveryResponse{TypeUrl: controlv1.ListenerType, Resources: []*controlv1.Resource{other}}), "is a type.googleapis.com/gateway.control.v1.BackendCluster in a"},
		"delta twice":       {enc(&controlv1.DeltaDiscoveryResponse{TypeUrl: controlv1.ListenerType, Resources: []*controlv1.Resource{good, good}}), `resource "a" twice`},
		"delta wire type":   {protowire.AppendVarint(protowire.AppendTag(nil, deltaTypeURL, protowire.VarintType), 1), "wire type"},
	} {
		var err error
		if strings.HasPrefix(name, "sotw") {
			_, err = parseResponse(tt.b)
		} else {
			_, err = parseDeltaResponse(tt.b)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tt.want)
		}
	}
}

// The parsers never panic, and what they accept is consistent.
func FuzzParseResponses(f *testing.F) {
	snap, _ := proto.Marshal(&controlv1.DiscoveryResponse{Version: "v", Nonce: "1", Snapshot: &controlv1.ConfigSnapshot{Id: "x"}})
	delta, _ := proto.Marshal(&controlv1.DeltaDiscoveryResponse{TypeUrl: controlv1.ListenerType, NonIncremental: true,
		Resources: []*controlv1.Resource{{Name: "a", Version: "1", Resource: &anypb.Any{TypeUrl: controlv1.ListenerType}}}, RemovedResources: []string{"b"}})
	f.Add(snap)
	f.Add(delta)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := parseResponse(b); err == nil && r.version == "" {
			t.Fatal("accepted a snapshot without a version")
		}
		if r, err := parseDeltaResponse(b); err == nil {
			names := map[string]bool{}
			for _, res := range r.resources {
				if res.name == "" || res.version == "" || names[res.name] {
					t.Fatalf("accepted resource %+v", res)
				}
				names[res.name] = true
			}
		}
		_, _ = decodeWarm(b)
	})
}

// initial_resource_versions: per type a JSON object of name → version;
// anything else is refused naming the type.
func FuzzInitialVersions(f *testing.F) {
	f.Add(controlv1.ListenerType, `{"a/80": "v1", "b/81": "v2"}`)
	f.Add(controlv1.ListenerType, `{"a": 1}`)
	f.Add("t", `[]`)
	f.Add("t", `{"\u0000": ""}`)
	f.Fuzz(func(t *testing.T, typ, js string) {
		out, err := parseInitialVersions(map[string]string{typ: js})
		if err != nil {
			if !strings.Contains(err.Error(), "initial_resource_versions") {
				t.Fatalf("error %q does not say where", err)
			}
			return
		}
		back := encodeInitialVersions(out)
		again, err := parseInitialVersions(back)
		if err != nil || len(again[typ]) != len(out[typ]) {
			t.Fatalf("round trip: %v %v", again, err)
		}
	})
}
