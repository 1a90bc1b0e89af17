package main

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// Stuck clients sync, then never read again and keep their streams open:
// a control plane churning 50 times a second reaches none of them.
func TestStuckClientsStopReading(t *testing.T) {
	const clients = 6
	addr := startDemoCP(t, fleet.StyleEnvoy)
	for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
		t.Run(string(proto), func(t *testing.T) {
			e, err := NewEngine(Config{Target: addr, Clients: clients, StreamsPerConn: 2, Protocol: proto,
				StuckRatio: 1, Duration: 500 * time.Millisecond, SyncTimeout: 10 * time.Second,
				Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.Run(testContext(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.Synced != clients || s.Updates != 0 || s.StreamErrors != 0 {
				t.Errorf("synced %d of %d, updates %d, stream errors %d: want all synced, no update, no error",
					s.Synced, clients, s.Updates, s.StreamErrors)
			}
		})
	}
}

// A connection gets the fixed small windows when it carries a stuck client.
func TestStuckConn(t *testing.T) {
	e, err := NewEngine(Config{Target: "h:1", Clients: 10, StreamsPerConn: 3, StuckRatio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	// Clients 3 and 7 are stuck (picked spreads them evenly): connections 1 and 2.
	var got []bool
	for j := range 4 {
		got = append(got, e.stuckConn(j))
	}
	if want := []bool{false, true, true, false}; !slices.Equal(got, want) {
		t.Errorf("stuck connections %v, want %v", got, want)
	}
}
