package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// setup starts an upstream serving target → backend A plus the xDS server
// the clients use, and returns them with the bootstrap for node id.
func setup(t *testing.T, target, id string) (up *xdstest.Upstream, a, b *xdstest.Backend, bootstrap []byte) {
	t.Helper()
	up = xdstest.StartUpstream(t)
	a = xdstest.StartBackend(t, "A")
	b = xdstest.StartBackend(t, "B")
	up.SetResources(xdstest.GRPCResources(target, a.Addr()))
	xdsAddr := startRelay(t, up.Addr())
	bootstrap = xdstest.Bootstrap{ServerURI: xdsAddr, NodeID: id, NodeCluster: "integration"}.JSON()
	return up, a, b, bootstrap
}

// wantSubscribed checks that the upstream was asked for target's listener
// by the relay's own node, never the client's.
func wantSubscribed(t *testing.T, up *xdstest.Upstream, target string) {
	t.Helper()
	want := xdstest.RelayConfig("", "").Node.ID
	up.WaitRequest(t, 0, "an LDS request for "+target+" from node "+want, func(r xdstest.Request) bool {
		return r.TypeURL() == resource.ListenerType && slices.Contains(r.Names(), target) && r.Node.GetId() == want
	})
}

// callUntil calls target until the answer comes from backend want.
func callUntil(ctx context.Context, conn *grpc.ClientConn, want string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		var md metadata.MD
		err := conn.Invoke(ctx, xdstest.EchoMethod, &emptypb.Empty{}, &emptypb.Empty{},
			grpc.Header(&md), grpc.WaitForReady(true))
		switch got := md.Get(xdstest.BackendHeader); {
		case err == nil && slices.Equal(got, []string{want}):
			return nil
		case err == nil:
			last = fmt.Sprintf("answered by %q", got)
		default:
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer from backend %s: %w; last: %s", want, ctx.Err(), last)
		case <-tick.C: // pacing between calls while the update propagates
		}
	}
}

// grpc-go, in process: the xDS resolver gets its bootstrap directly (the
// GRPC_XDS_BOOTSTRAP* variables are read once per process). It reaches A,
// then follows an EDS change to B.
func TestGRPCGoClient(t *testing.T) {
	t.Parallel()
	const target = "grpc-go-svc"
	up, a, b, bootstrap := setup(t, target, "grpc-go-client")
	conn := dialXDS(t, bootstrap, target)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "A"); err != nil {
		t.Fatalf("first RPC: %v", err)
	}
	wantSubscribed(t, up, target)

	up.SetResources(xdstest.GRPCResources(target, b.Addr()))
	ctx, cancel = context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "B"); err != nil {
		t.Fatalf("after the EDS change to B: %v", err)
	}
	if a.Calls() == 0 || b.Calls() == 0 {
		t.Errorf("calls: A %d, B %d; want both > 0", a.Calls(), b.Calls())
	}
}

// @grpc/grpc-js-xds: node/client.js with the bootstrap inline in
// GRPC_XDS_BOOTSTRAP_CONFIG.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	node := lookPath("node")
	if node == "" {
		node = "/usr/bin/node" // reported as missing below
	}
	requireRuntime(t, "the Node client", node, "node/node_modules/@grpc/grpc-js-xds/package.json")
	const target = "node-svc"
	up, _, _, bootstrap := setup(t, target, "node-client")

	out := runClient(t, clientEnv("GRPC_XDS_BOOTSTRAP_CONFIG="+string(bootstrap)),
		node, "node/client.js", "--target", "xds:///"+target, "--timeout", "45")
	if !strings.Contains(out, "x-backend=A") {
		t.Fatalf("node client output %q, want x-backend=A", out)
	}
	wantSubscribed(t, up, target)
}

// Debian's python3-grpcio (C-core), unpacked into python/.deb by
// .ci/install-clients.sh, with the bootstrap in a GRPC_XDS_BOOTSTRAP file.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	deb := requirePython(t)
	const target = "python-svc"
	up, _, _, bootstrap := setup(t, target, "python-client")
	if out := runPython(t, deb, bootstrap, target); !strings.Contains(out, "x-backend=A") {
		t.Fatalf("python client output %q, want x-backend=A", out)
	}
	wantSubscribed(t, up, target)
}

// dialXDS is a grpc-go channel to xds:///target, its xDS resolver built from
// bootstrap in process (the GRPC_XDS_BOOTSTRAP* variables are read once per
// process). It is closed when the test ends.
func dialXDS(t *testing.T, bootstrap []byte, target string) *grpc.ClientConn {
	t.Helper()
	builder, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(builder))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

const python = "/usr/bin/python3"

// requirePython returns the directory Debian's python3-grpcio was unpacked
// into; it fails the test when it is missing (skips only with -short).
func requirePython(t *testing.T) string {
	t.Helper()
	deb, err := absPath("python/.deb")
	if err != nil {
		t.Fatal(err)
	}
	requireRuntime(t, "the Python client", python, deb+"/usr/lib/python3/dist-packages/grpc/__init__.py")
	return deb
}

// runPython runs python/client.py against xds:///target with bootstrap in a
// GRPC_XDS_BOOTSTRAP file (federation enabled) and returns its output.
func runPython(t *testing.T, deb string, bootstrap []byte, target string) string {
	t.Helper()
	env := clientEnv(
		"GRPC_XDS_BOOTSTRAP="+writeFile(t, "bootstrap.json", bootstrap),
		"GRPC_EXPERIMENTAL_XDS_FEDERATION=true",
		"PYTHONPATH="+deb+"/usr/lib/python3/dist-packages",
		"LD_LIBRARY_PATH="+deb+"/usr/lib/x86_64-linux-gnu:"+deb+"/usr/lib",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	return runClient(t, env, python, "python/client.py", "--target", "xds:///"+target, "--timeout", "45")
}
