package relay_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// grpc.health.v1 on the xDS listener follows readiness: SERVING while
// /readyz would answer 200, NOT_SERVING while drained (the health service
// is answered though new xDS streams are refused), SERVING again after
// EndDrain, and never SERVING again once a shutdown began. Check and Watch
// agree.
func TestHealthFollowsReadiness(t *testing.T) {
	r, _ := drainFleet(t, 0, 1)
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return resp.GetStatus()
	}
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil || resp.GetStatus() != want {
			t.Fatalf("Watch: %v %v, want %v", resp.GetStatus(), err, want)
		}
	}

	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check on a ready relay = %v, want SERVING", got)
	}
	next(healthpb.HealthCheckResponse_SERVING)

	r.StartDrain() // closes the connections open now: the Watch's, too
	for {
		if _, err := watch.Recv(); err != nil {
			break // its connection closed; the client's next calls reconnect
		}
	}
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check while drained = %v, want NOT_SERVING", got)
	}
	if watch, err = hc.Watch(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	next(healthpb.HealthCheckResponse_NOT_SERVING)

	r.EndDrain()
	next(healthpb.HealthCheckResponse_SERVING)
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check after EndDrain = %v, want SERVING", got)
	}

	// The shutdown closes the connection at once (drain window 0): the
	// Watch sees NOT_SERVING or its end, never SERVING.
	r.StopServing()
	if resp, err := watch.Recv(); err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch at shutdown: %v, want NOT_SERVING or the end of the stream", resp.GetStatus())
	}
}
