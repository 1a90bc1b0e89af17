package controlv1_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// field is one row of the published field table (ref/gateway-control-v1.md):
// number, name, kind ("message:FullName" / "enum:FullName" for those),
// repeated, map.
type field struct {
	num      protoreflect.FieldNumber
	name     string
	kind     string
	repeated bool
}

// table is the field table, message by message.
var table = map[string][]field{
	"DiscoveryRequest": {{1, "node_id", "string", false}, {2, "cluster", "string", false}, {3, "version", "string", false},
		{4, "nonce", "string", false}, {5, "subscriptions", "string", true},
		{6, "result_status", "enum:gateway.control.v1.DiscoveryResultStatus", false}, {7, "error_detail", "string", false},
		{8, "supported_features", "string", true}},
	"DiscoveryResponse": {{1, "version", "string", false}, {2, "nonce", "string", false},
		{3, "snapshot", "message:gateway.control.v1.ConfigSnapshot", false}},
	"ConfigSnapshot": {{1, "id", "string", false}, {2, "generated_at", "message:google.protobuf.Timestamp", false},
		{3, "listeners", "message:gateway.control.v1.Listener", true}, {4, "http_routes", "message:gateway.control.v1.HttpRoute", true},
		{5, "grpc_routes", "message:gateway.control.v1.GrpcRoute", true}, {6, "stream_routes", "message:gateway.control.v1.StreamRoute", true},
		{7, "backends", "message:gateway.control.v1.BackendCluster", true}, {8, "secrets", "message:gateway.control.v1.SecretMaterial", true},
		{9, "extensions", "message:google.protobuf.Struct", false}, {10, "required_features", "string", true},
		{11, "compatibility_profile", "string", false}},
	"StatusReport": {{1, "node_id", "string", false}, {2, "version", "string", false}, {3, "ready", "bool", false},
		{4, "message", "string", false}, {5, "observed_at", "message:google.protobuf.Timestamp", false}},
	"StatusAck": {{1, "accepted", "bool", false}},
	"DeltaDiscoveryRequest": {{1, "node_id", "string", false}, {2, "cluster", "string", false},
		{3, "resource_names_subscribe", "string", true}, {4, "resource_names_unsubscribe", "string", true},
		{5, "initial_resource_versions", "map<string,string>", false}, {6, "response_nonce", "string", false},
		{7, "type_url", "string", false}, {8, "result_status", "enum:gateway.control.v1.DiscoveryResultStatus", false},
		{9, "error_detail", "string", false}, {10, "supported_features", "string", true}},
	"DeltaDiscoveryResponse": {{1, "system_version_info", "string", false}, {2, "nonce", "string", false},
		{3, "type_url", "string", false}, {4, "resources", "message:gateway.control.v1.Resource", true},
		{5, "removed_resources", "string", true}, {6, "non_incremental", "bool", false}},
	"Resource": {{1, "name", "string", false}, {2, "version", "string", false}, {3, "resource", "message:google.protobuf.Any", false},
		{4, "alias", "string", false}, {5, "ttl", "message:google.protobuf.Duration", false}},
}

func kindOf(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map<" + fd.MapKey().Kind().String() + "," + fd.MapValue().Kind().String() + ">"
	case fd.Kind() == protoreflect.MessageKind:
		return "message:" + string(fd.Message().FullName())
	case fd.Kind() == protoreflect.EnumKind:
		return "enum:" + string(fd.Enum().FullName())
	}
	return fd.Kind().String()
}

// The generated descriptors carry exactly the table's fields: numbers,
// names, types, cardinality — no field more, none less.
func TestFieldTable(t *testing.T) {
	fd := controlv1.File_gateway_controlv1_control_proto
	if fd.Package() != "gateway.control.v1" {
		t.Fatalf("package %s", fd.Package())
	}
	for msg, fields := range table {
		md := fd.Messages().ByName(protoreflect.Name(msg))
		if md == nil {
			t.Errorf("no message %s", msg)
			continue
		}
		if md.Fields().Len() != len(fields) {
			t.Errorf("%s has %d fields, the table %d", msg, md.Fields().Len(), len(fields))
		}
		for _, f := range fields {
			got := md.Fields().ByNumber(f.num)
			if got == nil {
				t.Errorf("%s: no field %d", msg, f.num)
				continue
			}
			if string(got.Name()) != f.name || kindOf(got) != f.kind || (got.IsList() != f.repeated) {
				t.Errorf("%s field %d = %s %s (repeated %v), want %s %s (repeated %v)", msg, f.num, got.Name(), kindOf(got),
					got.IsList(), f.name, f.kind, f.repeated)
			}
		}
	}
	enum := fd.Enums().ByName("DiscoveryResultStatus")
	for num, name := range map[protoreflect.EnumNumber]string{0: "UNSPECIFIED", 1: "ACK", 2: "NACK"} {
		if v := enum.Values().ByNumber(num); v == nil || string(v.Name()) != "DISCOVERY_RESULT_STATUS_"+name {
			t.Errorf("DiscoveryResultStatus %d = %v, want %s", num, v, name)
		}
	}
	for svc, methods := range map[string][]string{
		"ConfigurationDiscoveryService": {"StreamConfiguration:stream:DiscoveryRequest:DiscoveryResponse", "ReportStatus:unary:StatusReport:StatusAck"},
		"DeltaDiscoveryService":         {"DeltaStreamConfiguration:stream:DeltaDiscoveryRequest:DeltaDiscoveryResponse"},
	} {
		sd := fd.Services().ByName(protoreflect.Name(svc))
		if sd == nil || sd.Methods().Len() != len(methods) {
			t.Fatalf("service %s: %v", svc, sd)
		}
		for _, m := range methods {
			parts := strings.Split(m, ":")
			name, kind, in, out := parts[0], parts[1], parts[2], parts[3]
			md := sd.Methods().ByName(protoreflect.Name(name))
			stream := md != nil && md.IsStreamingClient() && md.IsStreamingServer()
			if md == nil || (kind == "stream") != stream || string(md.Input().Name()) != in || string(md.Output().Name()) != out {
				t.Errorf("%s.%s = %v, want %s %s → %s", svc, name, md, kind, in, out)
			}
		}
	}
}

// The encoding puts every field under the table's number: each field set,
// marshalled, walked with protowire.
func TestWireNumbers(t *testing.T) {
	ts := timestamppb.Now()
	msgs := map[string]proto.Message{
		"DiscoveryRequest": &controlv1.DiscoveryRequest{NodeId: "n", Cluster: "c", Version: "v", Nonce: "1", Subscriptions: []string{"t"},
			ResultStatus: controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK, ErrorDetail: "e", SupportedFeatures: []string{"f"}},
		"DiscoveryResponse": &controlv1.DiscoveryResponse{Version: "v", Nonce: "1", Snapshot: &controlv1.ConfigSnapshot{Id: "s"}},
		"StatusReport":      &controlv1.StatusReport{NodeId: "n", Version: "v", Ready: true, Message: "m", ObservedAt: ts},
		"DeltaDiscoveryRequest": &controlv1.DeltaDiscoveryRequest{NodeId: "n", Cluster: "c", ResourceNamesSubscribe: []string{"a"},
			ResourceNamesUnsubscribe: []string{"b"}, InitialResourceVersions: map[string]string{"t": "{}"}, ResponseNonce: "1",
			TypeUrl: "t", ResultStatus: controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_ACK, ErrorDetail: "e", SupportedFeatures: []string{"f"}},
		"DeltaDiscoveryResponse": &controlv1.DeltaDiscoveryResponse{SystemVersionInfo: "v", Nonce: "1", TypeUrl: "t",
			Resources: []*controlv1.Resource{{Name: "r"}}, RemovedResources: []string{"x"}, NonIncremental: true},
		"Resource": &controlv1.Resource{Name: "r", Version: "v", Resource: &anypb.Any{TypeUrl: "t"}, Alias: "a", Ttl: durationpb.New(1)},
	}
	for name, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[protowire.Number]bool{}
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatalf("%s: bad encoding", name)
			}
			seen[num] = true
			want := table[name][int(num)-1]
			if want.num != protoreflect.FieldNumber(num) {
				t.Fatalf("%s: field %d not in the table", name, num)
			}
			wantType := protowire.BytesType
			if want.kind == "bool" || strings.HasPrefix(want.kind, "enum") {
				wantType = protowire.VarintType
			}
			if typ != wantType {
				t.Errorf("%s field %d (%s) has wire type %d, want %d", name, num, want.name, typ, wantType)
			}
			b = b[n:]
			b = b[protowire.ConsumeFieldValue(num, typ, b):]
		}
		if len(seen) != len(table[name]) {
			t.Errorf("%s: %d fields on the wire, the table has %d", name, len(seen), len(table[name]))
		}
	}
}
