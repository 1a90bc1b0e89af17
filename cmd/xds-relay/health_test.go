package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// grpc.health.v1 on --listen, as grpc-health-probe and the kubelet's gRPC
// probes ask: SERVING when ready, NOT_SERVING while drained (POST /drain),
// SERVING again after DELETE /drain.
func TestGRPCHealth(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := startRun(t, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--upstream", up.Addr())
	conn, err := grpc.NewClient(r.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: ""})
		if err != nil {
			t.Fatalf("Health/Check: %v", err)
		}
		return resp.GetStatus()
	}
	xdstest.Eventually(t, func() bool { return status() == healthpb.HealthCheckResponse_SERVING }, "SERVING", nil)

	if code, _ := call(t, http.MethodPost, "http://"+r.Admin+"/drain"); code != http.StatusAccepted {
		t.Fatalf("POST /drain = %d", code)
	}
	if got := status(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Health/Check while drained = %v, want NOT_SERVING", got)
	}
	if code, _ := call(t, http.MethodDelete, "http://"+r.Admin+"/drain"); code != http.StatusOK {
		t.Fatalf("DELETE /drain = %d", code)
	}
	if got := status(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Health/Check after DELETE /drain = %v, want SERVING", got)
	}
}
