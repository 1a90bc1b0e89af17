package main

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// A new client's probe gets its first CDS response from a control plane.
func TestFirstResponse(t *testing.T) {
	srv, err := fleet.NewServer(fleet.ServerConfig{Spec: fleet.Spec{Listeners: 1, Routes: 1, Clusters: 3,
		EndpointsPerCluster: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { done <- srv.Serve(sctx, lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	if err := firstResponse(ctx, lis.Addr().String(), "probe-1"); err != nil {
		t.Fatal(err)
	}
}

// A prober repeats its probe until stopped and counts errors apart.
func TestProber(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := make(chan struct{}, 100)
	n := 0 // owned by the prober's goroutine
	p := startProber(ctx, "p", func(context.Context) error {
		n++
		calls <- struct{}{}
		if n%2 == 0 {
			return errors.New("even")
		}
		return nil
	})
	for range 4 {
		select {
		case <-calls:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	st := p.stop()
	if st.Count < 2 || st.Errors < 2 || st.Count+st.Errors != len(calls)+4 || st.LastError != "even" {
		t.Errorf("stats %+v after %d calls", st, len(calls)+4)
	}
}
