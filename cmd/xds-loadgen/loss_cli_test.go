package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The loss check fails the run: xds-loadgen exits 1, naming the losses, when
// the control plane tells its clients that a resource they held is gone,
// and 0 with --allow-removals (a control plane that deletes on purpose).
func TestRunFailsOnLoss(t *testing.T) {
	for _, tt := range []struct {
		name  string
		extra []string
		code  int
	}{
		{"loss fails the run", nil, 1},
		{"allowed removals", []string{"--allow-removals"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const clients = 2
			up := xdstest.StartUpstream(t)
			all := xdstest.GRPCResources("svc", "127.0.0.1:1")
			up.SetResources(all)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append([]string{"--target", up.Addr(), "--clients", "2", "--mode", "grpc", "--lds-name", "svc",
					"--duration", "3s", "--json", "--log-level", "error"}, tt.extra...), &out, &errOut, nil)
			}()
			// Synced: every client ACKed its endpoints (the end of LDS → RDS → CDS → EDS).
			xdstest.Eventually(t, func() bool {
				acked := map[int64]bool{}
				for _, r := range up.Requests() {
					if r.TypeURL() == resource.EndpointType && r.Nonce() != "" && !r.IsNACK() {
						acked[r.StreamID] = true
					}
				}
				return len(acked) >= clients
			}, "both clients synced", nil)
			without := xdstest.Resources{}
			for typ, res := range all {
				if typ != resource.ClusterType {
					without[typ] = res
				}
			}
			up.SetResources(without) // the cluster the route names is gone

			var code int
			select {
			case code = <-done:
			case <-ctx.Done():
				t.Fatal("xds-loadgen did not return")
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, errOut.String())
			}
			var s Summary
			if err := json.Unmarshal(out.Bytes(), &s); err != nil {
				t.Fatalf("stdout is not a JSON summary: %v\n%s", err, out.String())
			}
			if s.Losses < clients {
				t.Errorf("summary counts %d losses, want ≥ %d", s.Losses, clients)
			}
			if lost := strings.Contains(errOut.String(), "resources lost"); lost != (tt.code == 1) {
				t.Errorf("stderr %q: mentions the losses %v, want %v", errOut.String(), lost, tt.code == 1)
			}
		})
	}
}
