package main

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/fleet"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// startLRSFleet serves a small fleet with load reporting every 100 ms on
// 127.0.0.1:0 until the test ends.
func startLRSFleet(t *testing.T) (*fleet.Server, string) {
	t.Helper()
	srv, err := fleet.NewServer(fleet.ServerConfig{
		Spec:               fleet.Spec{Listeners: 1, Routes: 1, Clusters: 5, EndpointsPerCluster: 1, Style: fleet.StyleEnvoy},
		LoadReportInterval: 100 * time.Millisecond,
		Logger:             zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, lis.Addr().String()
}

// With LoadReport every client reports load for the clusters it holds, at
// the server's interval: directly, and through a relay that sums the
// reports and sends them on to the control plane.
func TestLoadReports(t *testing.T) {
	const clients = 20
	for _, through := range []string{"direct", "relay"} {
		t.Run(through, func(t *testing.T) {
			srv, target := startLRSFleet(t)
			if through == "relay" {
				target = xdstest.StartRelay(t, target).Addr()
			}
			e, err := NewEngine(Config{Target: target, Clients: clients, StreamsPerConn: 5, LoadReport: true,
				Duration: time.Second, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.Run(testContext(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.Synced != clients || s.LoadReports == 0 {
				t.Fatalf("synced %d of %d, load reports %d", s.Synced, clients, s.LoadReports)
			}
			deadline := time.Now().Add(10 * time.Second)
			for srv.LoadStats().Requests == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the control plane received no load within 10s: %+v", srv.LoadStats())
				}
				time.Sleep(20 * time.Millisecond)
			}
			ls := srv.LoadStats()
			if through == "direct" && ls.Streams < clients {
				t.Errorf("direct: %d LRS streams at the control plane, want one per client (%d)", ls.Streams, clients)
			}
			if through == "relay" && ls.Streams != 1 {
				t.Errorf("relay: %d LRS streams at the control plane, want the relay's one", ls.Streams)
			}
		})
	}
}
