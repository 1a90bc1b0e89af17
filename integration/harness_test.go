package integration_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// clientTimeout bounds one real client run: process start, xDS resolution
// and the first successful RPC. Generous, as CI machines are small.
const clientTimeout = 60 * time.Second

// startRelay starts an xds-relay in front of the upstream and returns the
// xDS address the clients of a test use.
func startRelay(t *testing.T, upstreamAddr string) string {
	t.Helper()
	return xdstest.StartRelayLogged(t, zaptest.NewLogger(t), upstreamAddr).Addr()
}

// requireRuntime fails the test, naming the install command, when a client
// runtime is missing: a real-client test never passes by being skipped
// (`make test` installs them first). Only -short skips it.
func requireRuntime(t *testing.T, what string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			msg := what + " is not installed (" + p + " missing): run .ci/install-clients.sh, or make test"
			if testing.Short() {
				t.Skip(msg + " (skipped: -short)")
			}
			t.Fatal(msg)
		}
	}
}

// lookPath is exec.LookPath that returns "" instead of an error.
func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// clientEnv is the environment of a client subprocess: this process's,
// minus any gRPC xDS settings, plus env.
func clientEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GRPC_") {
			continue
		}
		out = append(out, kv)
	}
	if os.Getenv("XDSTEST_CLIENT_TRACE") != "" {
		out = append(out, "GRPC_VERBOSITY=DEBUG", "GRPC_TRACE=xds_client,xds_resolver")
	}
	return append(out, env...)
}

// runClient runs a client to completion and returns its stdout; on failure
// (non-zero exit or timeout) it fails the test with stdout and stderr.
func runClient(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v (context: %v)\n--- stdout:\n%s\n--- stderr:\n%s", filepath.Base(name),
			strings.Join(args, " "), err, ctx.Err(), stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", filepath.Base(name), stderr.String())
	}
	return stdout.String()
}

// writeFile writes data to a new file in the test's temp dir.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// absPath makes a path relative to this package's directory absolute.
func absPath(rel string) (string, error) {
	return filepath.Abs(rel)
}
