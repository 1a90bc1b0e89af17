package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/fleet"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A few hundred simulated clients through the relay, SotW and Delta: every
// client syncs, sees updates, and the control plane serves one relay.
func TestThroughRelay(t *testing.T) {
	const clients = 300
	cp := startDemoCP(t, fleet.StyleEnvoy)
	r := xdstest.StartRelay(t, cp)
	for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
		t.Run(string(proto), func(t *testing.T) {
			e, err := NewEngine(Config{
				Target: r.Addr(), Clients: clients, StreamsPerConn: 10, Mode: ModeEnvoy, Protocol: proto,
				Duration: 10 * time.Second, Updates: 2, SyncTimeout: 20 * time.Second,
				Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // generous: -race on 2 cores
			defer cancel()
			s, err := e.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.Synced != clients || s.Failed != 0 {
				t.Fatalf("synced %d failed %d of %d", s.Synced, s.Failed, clients)
			}
			if s.Updates < 2*clients {
				t.Errorf("updates %d, want ≥ %d", s.Updates, 2*clients)
			}
		})
	}
}
