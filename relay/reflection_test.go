package relay_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The xDS listener serves gRPC server reflection, which grpcurl needs for
// the docs' commands (grpcurl ... envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus):
// it lists the xDS, CSDS and gateway.control.v1 services and describes
// them.
func TestServerReflection(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr())
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection: %v", e)
		}
		return resp
	}

	resp := ask(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}})
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{
		"envoy.service.discovery.v3.AggregatedDiscoveryService",
		"envoy.service.cluster.v3.ClusterDiscoveryService",
		"envoy.service.status.v3.ClientStatusDiscoveryService",
		"gateway.control.v1.ConfigurationDiscoveryService",
		"gateway.control.v1.DeltaDiscoveryService",
	} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, not %s", services, want)
		}
	}

	// grpcurl resolves the method's service to its file, then the messages.
	resp = ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "envoy.service.status.v3.ClientStatusDiscoveryService"}})
	found := false
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		for _, s := range fd.GetService() {
			if fd.GetPackage()+"."+s.GetName() == "envoy.service.status.v3.ClientStatusDiscoveryService" {
				found = true
			}
		}
	}
	if !found {
		t.Error("no file descriptor describing ClientStatusDiscoveryService")
	}
}
