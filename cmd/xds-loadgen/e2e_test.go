package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startDemoCP serves a churning fleet on 127.0.0.1:0 until the test ends and returns its address.
func startDemoCP(t *testing.T, style fleet.Style) string {
	return startFleet(t, fleet.Spec{Listeners: 2, Routes: 2, Clusters: 20, EndpointsPerCluster: 2, Style: style})
}

// startFleet serves spec (as TP2 variants, if any), churning, on 127.0.0.1:0
// until the test ends and returns its address.
func startFleet(t *testing.T, spec fleet.Spec, variants ...string) string {
	t.Helper()
	var vs fleet.Variants
	if len(variants) > 0 {
		vs = fleet.Variants{Key: "env", Values: variants}
	}
	srv, err := fleet.NewServer(fleet.ServerConfig{
		Spec:       spec,
		Variants:   vs,
		Churn:      50,
		ChurnKinds: []fleet.Kind{fleet.Clusters, fleet.Endpoints, fleet.Routes, fleet.Listeners},
		ChurnCount: 2,
		Logger:     zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
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
	return lis.Addr().String()
}

func TestEndToEnd(t *testing.T) {
	const clients = 50
	for _, style := range []fleet.Style{fleet.StyleEnvoy, fleet.StyleGRPC} {
		addr := startDemoCP(t, style)
		mode := Mode(style)
		for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
			t.Run(fmt.Sprintf("%s/%s", mode, proto), func(t *testing.T) {
				e, err := NewEngine(Config{
					Target:         addr,
					Clients:        clients,
					StreamsPerConn: 5,
					Mode:           mode,
					Protocol:       proto,
					LDSName:        fleet.ListenerName(1),
					Duration:       10 * time.Second, // upper bound; Updates ends the run
					Updates:        3,
					SyncTimeout:    10 * time.Second,
					NACKRatio:      0.1,
					SlowRatio:      0.1,
					SlowDelay:      5 * time.Millisecond,
					Logger:         zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
				})
				if err != nil {
					t.Fatal(err)
				}
				s, err := e.Run(testContext(t))
				if err != nil {
					t.Fatal(err)
				}
				if s.Synced != clients || s.Failed != 0 || s.TimeToSyncAllMS == nil {
					t.Errorf("synced %d failed %d of %d", s.Synced, s.Failed, clients)
				}
				if s.Connections != clients/5 {
					t.Errorf("connections %d, want %d", s.Connections, clients/5)
				}
				if s.Updates < 3*clients || s.Propagation.Samples == 0 || s.Propagation.Max <= 0 {
					t.Errorf("updates %d, propagation %+v: want ≥ %d updates with samples", s.Updates, s.Propagation, 3*clients)
				}
				if s.NACKs == 0 || s.BytesReceived == 0 || s.Responses == 0 {
					t.Errorf("nacks %d bytes %d responses %d", s.NACKs, s.BytesReceived, s.Responses)
				}
				if p := e.Progress(); p.Synced != clients || p.Connected != 0 || p.Launched != clients {
					t.Errorf("final progress %+v", p)
				}
				if s.Losses != 0 {
					t.Errorf("%d losses from xds-democp, which deletes nothing: %+v", s.Losses, s.LossExamples)
				}
			})
		}
	}
}

func TestRunCLI(t *testing.T) {
	addr := startDemoCP(t, fleet.StyleEnvoy)
	var out, errOut bytes.Buffer
	code := run(testContext(t), []string{"--target", addr, "--clients", "10", "--ramp", "1000/s", "--duration", "10s",
		"--updates", "1", "--json", "--log-level", "warn"}, &out, &errOut, nil)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut.String())
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, out.String())
	}
	if s.Synced != 10 || s.Clients != 10 || s.Updates < 10 {
		t.Errorf("summary %+v", s)
	}
	// The run's config, its bounds and its rates.
	if c := s.Config; c.Target != addr || c.Clients != 10 || c.RampPerSecond != 1000 || c.Mode != ModeEnvoy || c.DurationMS != 10000 {
		t.Errorf("config %+v", c)
	}
	if s.StartedAt.IsZero() || !s.EndedAt.After(s.StartedAt) {
		t.Errorf("started %v ended %v", s.StartedAt, s.EndedAt)
	}
	if s.Rates.ResponsesPerSecond <= 0 || s.Rates.UpdatesPerSecond <= 0 || s.Rates.BytesPerSecond <= 0 {
		t.Errorf("rates %+v", s.Rates)
	}
	for _, key := range []string{`"config"`, `"started_at"`, `"ended_at"`, `"rates"`, `"losses": 0`, `"changes"`} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("JSON summary lacks %s", key)
		}
	}
}

func TestRunSyncFailure(t *testing.T) {
	// Nothing listens on this port once the listener is closed.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	var out, errOut bytes.Buffer
	code := run(testContext(t), []string{"--target", addr, "--clients", "3", "--sync-timeout", "200ms", "--log-level", "error"},
		&out, &errOut, nil)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "failed               3") || !strings.Contains(errOut.String(), "did not sync") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

func TestReportProgress(t *testing.T) {
	// The reporter writes only on ticks; cancelling before the first tick writes nothing on a pipe
	// and nothing but the final newline guard on a terminal.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var b bytes.Buffer
	reportProgress(ctx, &b, func() int { return 80 }, 0, func() Progress { return Progress{} })
	if b.Len() != 0 {
		t.Errorf("wrote %q", b.String())
	}
}

// On a terminal the progress line is cut to its width: a wrapped line could
// not be redrawn in place.
func TestReportProgressFitsTheTerminal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var b syncBuf
	done := make(chan struct{})
	go func() {
		defer close(done)
		reportProgress(ctx, &b, func() int { return 20 }, 0, func() Progress { return Progress{Clients: 1000, Connected: 1000} })
	}()
	for !strings.Contains(b.String(), "\r") { // the first tick, a second in
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	line := strings.TrimSuffix(strings.Split(b.String(), "\r")[1], "\n")
	if want := (Progress{Clients: 1000, Connected: 1000}).String()[:19]; line != want {
		t.Errorf("progress line %q, want %q (19 columns of a 20-column terminal)", line, want)
	}
}

// syncBuf is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
