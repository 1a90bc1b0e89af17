package relay_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The drain closes connections, not streams (downstream/drain.go): every
// stream of a connection — two ADS streams and a CSDS stream of one grpc-go
// channel here — ends with UNAVAILABLE when its connection is closed, and a
// second connection opened later is closed in its own slot, not before
// window/2 (the second of two).
func TestDrainEndsEveryStreamOfAConnection(t *testing.T) {
	const window = 400 * time.Millisecond
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Shutdown.DrainWindow = window }))

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	var shared []func() error // each returns the error that ended its stream
	for _, id := range []string{"a1", "a2"} {
		s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: id}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		shared = append(shared, func() error {
			for {
				if _, err := s.Recv(); err != nil {
					return err
				}
			}
		})
	}
	cs, err := statusv3.NewClientStatusDiscoveryServiceClient(conn).StreamClientStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&statusv3.ClientStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); err != nil {
		t.Fatal(err)
	}
	shared = append(shared, func() error {
		for {
			if _, err := cs.Recv(); err != nil {
				return err
			}
		}
	})
	later := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "b"}) // its own, younger connection
	later.Subscribe(resource.ClusterType, "*")
	later.Ack(later.RecvType(resource.ClusterType))

	errs := make(chan error, len(shared))
	for _, recv := range shared {
		go func() { errs <- recv() }()
	}
	start := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	r.Shutdown(sctx)
	for range shared {
		if err := <-errs; status.Code(err) != codes.Unavailable {
			t.Errorf("a stream of the shared connection ended with %v, want UNAVAILABLE", err)
		}
	}
	if err := later.Err(); status.Code(err) != codes.Unavailable {
		t.Errorf("the later connection's stream ended with %v, want UNAVAILABLE", err)
	}
	if d := time.Since(start); d < window/2 {
		t.Errorf("the drain of two connections took %v, less than the second one's slot at %v", d, window/2)
	}
}
