package main

import (
	"context"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A control plane that deletes a resource its clients hold makes every one
// of them count a loss: the omission from a SotW CDS response, the Delta
// removal.
func TestLossDetected(t *testing.T) {
	for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
		t.Run(string(proto), func(t *testing.T) {
			up := xdstest.StartUpstream(t)
			all := xdstest.GRPCResources("svc", "127.0.0.1:1")
			up.SetResources(all)
			const clients = 3
			e, err := NewEngine(Config{Target: up.Addr(), Clients: clients, Mode: ModeGRPC, Protocol: proto, LDSName: "svc",
				Duration: time.Minute, SyncTimeout: 10 * time.Second,
				Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan *Summary, 1)
			go func() {
				s, err := e.Run(ctx)
				if err != nil {
					t.Error(err)
				}
				done <- s
			}()
			xdstest.Eventually(t, func() bool { return e.Progress().Synced == clients }, "clients synced", nil)

			without := xdstest.Resources{}
			for typ, res := range all {
				if typ != resource.ClusterType {
					without[typ] = res
				}
			}
			up.SetResources(without) // the cluster the route names is gone
			xdstest.Eventually(t, func() bool { return e.ctr.losses.Load() >= clients }, "every client lost the cluster",
				func() any { return e.ctr.losses.Load() })
			cancel()
			s := <-done
			if s == nil || s.Losses < clients || len(s.LossExamples) == 0 {
				t.Fatalf("summary %+v, want ≥ %d losses", s, clients)
			}
			l := s.LossExamples[0]
			how := map[Protocol]string{ProtocolSotW: "omitted from a SotW response", ProtocolDelta: "removed_resources"}[proto]
			if l.Type != resource.ClusterType || l.Name != xdstest.NamesFor("svc").Cluster || l.How != how {
				t.Errorf("loss %+v, want the cluster %s", l, how)
			}
		})
	}
}

// A client's own unsubscription is not a loss; a removal of what it holds is.
func TestLossRule(t *testing.T) {
	st := newClientState(ModeGRPC, "l")
	st.types[0].known["x"] = resourceState{}
	if gone := st.retainOnly(0, map[string]bool{"x": true}); len(gone) != 0 {
		t.Errorf("retainOnly kept x and reported %v gone", gone)
	}
	if gone := st.retainOnly(0, nil); len(gone) != 1 || gone[0] != "x" {
		t.Errorf("retainOnly(nothing) = %v, want x", gone)
	}
	if st.remove(0, "never-held") {
		t.Error("removing a resource never held counts")
	}
}
