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
	// The drain closes the connections open when it starts, this one
	// included (spread over shutdown.drain_window): a Check in flight then
	// fails UNAVAILABLE and the prober asks again on a new connection, as
	// grpc-health-probe and the kubelet do. So each state is waited for.
	status := func() any {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: ""})
		if err != nil {
			return err
		}
		return resp.GetStatus()
	}
	is := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool { return status() == want }
	}
	xdstest.Eventually(t, is(healthpb.HealthCheckResponse_SERVING), "SERVING", status)

	if code, _ := call(t, http.MethodPost, "http://"+r.Admin+"/drain"); code != http.StatusAccepted {
		t.Fatalf("POST /drain = %d", code)
	}
	xdstest.Eventually(t, is(healthpb.HealthCheckResponse_NOT_SERVING), "NOT_SERVING while drained", status)
	if code, _ := call(t, http.MethodDelete, "http://"+r.Admin+"/drain"); code != http.StatusOK {
		t.Fatalf("DELETE /drain = %d", code)
	}
	xdstest.Eventually(t, is(healthpb.HealthCheckResponse_SERVING), "SERVING after DELETE /drain", status)
}
