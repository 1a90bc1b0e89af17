package main

import (
	"context"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// startGatewayCP serves the generated gateway fleet for clusters gw-0 and
// gw-1 and churns a route of each every 100 ms until the test ends.
func startGatewayCP(t *testing.T) *gatewaycp.Server {
	t.Helper()
	cp, err := gatewaycp.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := gatewaycp.NewFleet(gatewaycp.Spec{Listeners: 2, Routes: 10, Backends: 5, EndpointsPerBackend: 2})
	for _, c := range []string{"gw-0", "gw-1"} {
		cp.Set(c, f.Snapshot(c, time.Now()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				for _, c := range []string{"gw-0", "gw-1"} {
					cp.Set(c, f.Churn(c, 1, now))
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cp.Stop()
	})
	return cp
}

// Gateway data planes, SotW and Delta, against the control plane directly
// and through the relay: every client syncs and sees updates with
// propagation samples.
func TestGatewayDialect(t *testing.T) {
	cp := startGatewayCP(t)
	r := xdstest.StartRelay(t, cp.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Upstream.Linger = time.Minute }))
	for _, target := range []struct{ name, addr string }{{"direct", cp.Addr()}, {"relay", r.Addr()}} {
		for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
			t.Run(target.name+"/"+string(proto), func(t *testing.T) {
				s := runThrough(t, Config{Target: target.addr, Clients: 40, StreamsPerConn: 5, Dialect: DialectGateway,
					GatewayClusters: 2, Protocol: proto, Duration: 10 * time.Second, Updates: 2})
				if s.Propagation.Samples == 0 || s.Mode != "gateway" || s.NACKs != 0 {
					t.Errorf("summary: %d propagation samples, mode %q, %d NACKs", s.Propagation.Samples, s.Mode, s.NACKs)
				}
			})
		}
	}
	if n := len(r.DebugGateway("").Groups); n != 4 {
		t.Errorf("%d gateway groups at the relay, want 2 clusters × (SotW, Delta)", n)
	}
}
