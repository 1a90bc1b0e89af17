package xdstest_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestBackendAnswersAnyMethod(t *testing.T) {
	b := xdstest.StartBackend(t, "A")
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	for _, method := range []string{xdstest.EchoMethod, "/some.Other/Method"} {
		var md metadata.MD
		if err := conn.Invoke(ctx, method, wrapperspb.String("hello"), &emptypb.Empty{}, grpc.Header(&md)); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if got := md.Get(xdstest.BackendHeader); len(got) != 1 || got[0] != "A" {
			t.Errorf("%s: x-backend %q, want A", method, got)
		}
	}
	if b.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2", b.Calls())
	}
}

func TestBootstrapJSON(t *testing.T) {
	j := xdstest.Bootstrap{
		ServerURI: "127.0.0.1:1", NodeID: "n", NodeCluster: "c",
		Authorities: map[string]string{"a.example": "127.0.0.1:2", "b.example": ""},
	}.JSON()
	var got struct {
		XDSServers []struct {
			ServerURI    string           `json:"server_uri"`
			ChannelCreds []map[string]any `json:"channel_creds"`
		} `json:"xds_servers"`
		Node        struct{ ID, Cluster string } `json:"node"`
		Authorities map[string]struct {
			XDSServers []struct {
				ServerURI string `json:"server_uri"`
			} `json:"xds_servers"`
		} `json:"authorities"`
	}
	if err := json.Unmarshal(j, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.XDSServers) != 1 || got.XDSServers[0].ServerURI != "127.0.0.1:1" ||
		got.XDSServers[0].ChannelCreds[0]["type"] != "insecure" || got.Node.ID != "n" || got.Node.Cluster != "c" ||
		got.Authorities["a.example"].XDSServers[0].ServerURI != "127.0.0.1:2" ||
		len(got.Authorities["b.example"].XDSServers) != 0 {
		t.Errorf("bootstrap %s", j)
	}
}
