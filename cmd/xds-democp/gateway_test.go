package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// lockedBuffer is a bytes.Buffer safe for the logger's writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// --dialect gateway serves a snapshot per gateway cluster and churns them.
func TestRunGateway(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	errOut := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--dialect", "gateway", "--listen", addr, "--gateway-clusters", "2", "--routes", "4",
			"--churn", "20/s", "--log-level", "debug"}, &out, errOut)
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(errOut.String(), "control plane serving") {
		select {
		case <-tick.C:
		case code := <-done:
			t.Fatalf("exit %d:\n%s", code, errOut)
		case <-ctx.Done():
			t.Fatalf("not serving:\n%s", errOut)
		}
	}
	dp := xdstest.DialGatewaySotW(t, addr)
	dp.Send(&controlv1.DiscoveryRequest{NodeId: "dp", Cluster: "gw-1"})
	first := dp.MustRecv()
	if len(first.GetSnapshot().GetHttpRoutes()) != 4 || len(first.GetSnapshot().GetSecrets()) != 1 {
		t.Fatalf("snapshot %v", first.GetSnapshot())
	}
	dp.Send(&controlv1.DiscoveryRequest{Version: first.GetVersion(), Nonce: first.GetNonce(), ResultStatus: gatewaycp.ACK})
	if next := dp.MustRecv(); next.GetVersion() == first.GetVersion() {
		t.Fatal("no churned snapshot")
	}
	dp.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if !strings.Contains(errOut.String(), "xds-democp stopped") {
		t.Errorf("log:\n%s", errOut)
	}
	for _, args := range []string{"--dialect nginx", "--dialect gateway --control :1", "--gateway-clusters 0", "--secrets -1"} {
		if _, err := parseFlags(strings.Fields(args), &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
}
