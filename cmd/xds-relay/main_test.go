package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes. When
// a JSON log line with msg "serving" is written, it is sent on serving.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	serving chan []byte
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{serving: make(chan []byte, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bytes.Contains(p, []byte(`"msg":"serving"`)) {
		select {
		case b.serving <- bytes.Clone(p):
		default:
		}
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runArgs runs the command to completion with a 10 s context.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	errOut := newSyncBuffer()
	code = run(ctx, args, &out, errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fileConfig = `
listen: "127.0.0.1:20001"
admin: "127.0.0.1:20002"
node: {id: from-file}
upstream:
  xds_servers:
    - server_uri: "file.example:18000"
    - server_uri: "fallback.example:18000"
`

func TestFlagsOverrideFile(t *testing.T) {
	file := writeFile(t, fileConfig)
	fromFile := func(f func(*config.Config)) *config.Config {
		c := config.Default()
		c.Listen = "127.0.0.1:20001"
		c.Admin = "127.0.0.1:20002"
		c.Node.ID = "from-file"
		c.Upstream.XDSServers = []config.Server{
			{ServerURI: "file.example:18000"},
			{ServerURI: "fallback.example:18000"},
		}
		if f != nil {
			f(c)
		}
		return c
	}
	insecure := []config.ChannelCreds{{Type: "insecure"}}
	bootstrap := writeFile(t, `{"xds_servers": [{"server_uri": "cp.example:443", "channel_creds": [{"type": "google_default"}]}],
		"node": {"id": "ignored"}}`)
	tests := []struct {
		name string
		args []string
		want *config.Config
	}{
		{"defaults", nil, config.Default()},
		{"upstream flag only", []string{"--upstream", "127.0.0.1:18000"}, func() *config.Config {
			c := config.Default()
			c.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:18000", ChannelCreds: insecure}}
			return c
		}()},
		{"file only", []string{"--config", file}, fromFile(nil)},
		{"flag at its default value still overrides", []string{"--config", file, "--listen", ":18001"},
			fromFile(func(c *config.Config) { c.Listen = ":18001" })},
		{"node id flag", []string{"--config", file, "--node-id", "xds-relay-7f9c"},
			fromFile(func(c *config.Config) { c.Node.ID = "xds-relay-7f9c" })},
		{"probe listener by flag", []string{"--config", file, "--probe-listen", ":9903"},
			fromFile(func(c *config.Config) { c.ProbeListen = ":9903" })},
		{"channelz by flag", []string{"--config", file, "--channelz"},
			fromFile(func(c *config.Config) { c.Channelz = true })},
		{"admin disabled by flag", []string{"--config", file, "--admin="},
			fromFile(func(c *config.Config) { c.Admin = "" })},
		{"upstream replaces the file's servers", []string{"-config", file, "-upstream", "flag.example:1"},
			fromFile(func(c *config.Config) {
				c.Upstream.XDSServers = []config.Server{{ServerURI: "flag.example:1", ChannelCreds: insecure}}
			})},
		{"log flags do not touch the config", []string{"--config", file, "--log-level", "debug", "--log-format", "console"},
			fromFile(nil)},
		{"validate subcommand", []string{"validate", "--config", file, "--listen", "127.0.0.1:1"},
			fromFile(func(c *config.Config) { c.Listen = "127.0.0.1:1" })},
		{"validate after the flags", []string{"--config", file, "validate", "--listen", "127.0.0.1:1"},
			fromFile(func(c *config.Config) { c.Listen = "127.0.0.1:1" })},
		{"bootstrap replaces the file's servers", []string{"--config", file, "--upstream-bootstrap", bootstrap},
			fromFile(func(c *config.Config) {
				c.Upstream.BootstrapFile = bootstrap
				c.Upstream.XDSServers = []config.Server{{ServerURI: "cp.example:443",
					ChannelCreds: []config.ChannelCreds{{Type: "google_default"}}}}
			})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseArgs(tt.args, io.Discard)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			got, err := o.config()
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--listn", ":1"}, "xds-relay: flag provided but not defined: -listn (see xds-relay --help)\n"},
		{"missing value", []string{"--config"}, "xds-relay: flag needs an argument: -config (see xds-relay --help)\n"},
		{"bad log level", []string{"--log-level", "verbose"},
			`xds-relay: invalid value "verbose" for flag --log-level: want debug, info, warn or error (see xds-relay --help)` + "\n"},
		{"bad log format", []string{"--log-format", "xml"},
			`xds-relay: invalid value "xml" for flag --log-format: want json or console (see xds-relay --help)` + "\n"},
		{"extra argument", []string{"--upstream", "a:1", "serve"},
			`xds-relay: unexpected argument "serve" (see xds-relay --help)` + "\n"},
		{"bad bool", []string{"--version=maybe"},
			`xds-relay: invalid boolean value "maybe" for -version: parse error (see xds-relay --help)` + "\n"},
		{"two upstream flags", []string{"--upstream", "a:1", "--upstream-bootstrap", "b.json"},
			"xds-relay: --upstream and --upstream-bootstrap both replace the upstream servers: give one (see xds-relay --help)\n"},
		{"validate twice", []string{"validate", "--upstream", "a:1", "validate"},
			`xds-relay: unexpected argument "validate" (see xds-relay --help)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit code = %d, want %d", code, exitUsage)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if diff := cmp.Diff(tt.want, stderr); diff != "" {
				t.Errorf("stderr mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		code, stdout, stderr := runArgs(t, arg)
		if code != exitOK || stderr != "" {
			t.Errorf("%s: exit %d, stderr %q; want 0 and nothing", arg, code, stderr)
		}
		for _, want := range []string{
			"--config FILE", "--listen ADDR", "--admin ADDR", "--upstream ADDR", "--log-level LEVEL",
			"--log-format FORMAT", "--version", "--node-id ID", "--probe-listen ADDR", "probe_listen:",
			"grpc.health.v1", "xds-relay validate",
			"listen:", "admin:", "node:", "upstream:", "xds_servers:", "authorities:", "cache:", "limits:",
			"group_by", "canary_fraction", "dynamic_parameters_from_node",
			"tls:", "cert_file:", "key_file:", "client_ca_file:", "type: tls", "ca_certificate_file:",
			"--upstream-bootstrap FILE", "bootstrap_file:", "call_creds:", "jwt_token_file",
			"readiness:", "require_sync:", "shutdown:", "drain_window:", "xds-relay [flags] validate",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: help does not mention %q", arg, want)
			}
		}
		for _, e := range admin.Endpoints {
			if !strings.Contains(stdout, e.Route) {
				t.Errorf("%s: help does not list the admin endpoint %q", arg, e.Route)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runArgs(t, "--version")
	if code != exitOK || stdout != "xds-relay dev\n" {
		t.Errorf("--version = %d %q, want 0 %q", code, stdout, "xds-relay dev\n")
	}
}

func TestValidate(t *testing.T) {
	good := writeFile(t, fileConfig)
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stderrLine bool
	}{
		{"good file", []string{"validate", "--config", good}, exitOK, "config OK\n", "", false},
		{"flags only", []string{"validate", "--upstream", "127.0.0.1:18000"}, exitOK, "config OK\n", "", false},
		{"no upstream", []string{"validate"}, exitError, "",
			"xds-relay: config: upstream.xds_servers: at least one server is required", true},
		{"bad server", []string{"validate", "--config", writeFile(t, "upstream: {xds_servers: [{server_uri: nope}]}\n")},
			exitError, "", `upstream.xds_servers[0].server_uri: must be host:port, got "nope"`, true},
		{"tls creds", []string{"validate", "--config", writeFile(t,
			"upstream:\n  xds_servers:\n    - server_uri: 'a:1'\n      channel_creds: [{type: tls, config: {certificate_file: c.pem}}]\n")},
			exitError, "", "upstream.xds_servers[0].channel_creds[0].config.private_key_file: required with certificate_file", true},
		{"validate after the flags", []string{"--config", good, "validate"}, exitOK, "config OK\n", "", false},
		{"unknown key", []string{"validate", "--config", writeFile(t, "upstream: {xds_server: [], xds_servers: [{server_uri: 'a:1'}]}\n")},
			exitError, "", "upstream.xds_server: unknown field (line 1)", true},
		{"flag's field has no line", []string{"validate", "--listen", "nope", "--config", writeFile(t,
			"listen: ':1'\nupstream: {xds_servers: [{server_uri: 'a:1'}]}\n")},
			exitError, "", `xds-relay: config: listen: must be host:port, got "nope"` + "\n", true},
		{"later section", []string{"validate", "--upstream", "a:1", "--config", writeFile(t, "keying: {dynamic_parameters_from_node: {env: colour}}\n")},
			exitError, "", `config: keying.dynamic_parameters_from_node.env: unknown node field "colour"`, true},
		{"rollout", []string{"validate", "--upstream", "a:1", "--config", writeFile(t, "rollout: {hold: 0s, canary_fraction: 2}\n")},
			exitError, "", "xds-relay: config: rollout.canary_fraction: must be in [0, 1] (0: one canary per change), got 2 (line 1)\n" +
				"xds-relay: config: rollout.hold: must be positive, got 0s (to turn rollouts off, remove the rollout section) (line 1)\n", false},
		{"flag fixes the file", []string{"validate", "--config", writeFile(t, "listen: nope\nupstream: {xds_servers: [{server_uri: 'a:1'}]}\n"),
			"--listen", ":1"}, exitOK, "config OK\n", "", false},
		{"flag breaks the file", []string{"validate", "--config", good, "--admin", "nope"},
			exitError, "", `config: admin: must be host:port, got "nope"`, true},
		{"missing file", []string{"validate", "--config", filepath.Join(t.TempDir(), "missing.yaml")},
			exitError, "", "no such file or directory", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderrHas) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.stderrHas)
			}
			if tt.stderrLine && strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr = %q, want one line", stderr)
			}
		})
	}
}

// validate prints every problem at once: the file's unknown keys and bad
// values, then what Validate finds in the rest, each with its line.
func TestValidateEveryError(t *testing.T) {
	file := writeFile(t, "upstream:\n  xds_server: []\n  linger: soon\nlimits: {max_recv_message_bytes: 10}\nnode: {id: ''}\n")
	code, stdout, stderr := runArgs(t, "validate", "--config", file)
	want := "xds-relay: config: upstream.xds_server: unknown field (line 2) (in " + file + ")\n" +
		`xds-relay: config: upstream.linger: must be a duration like "5s" (line 3) (in ` + file + ")\n" +
		"xds-relay: config: node.id: must not be empty (line 5)\n" +
		"xds-relay: config: limits.max_recv_message_bytes: must be at least 65536 (a request carries the client's node), got 10 (line 4)\n" +
		"xds-relay: config: upstream.xds_servers: at least one server is required (line 1)\n"
	if code != exitError || stdout != "" {
		t.Errorf("exit code %d, stdout %q; want %d and nothing", code, stdout, exitError)
	}
	if diff := cmp.Diff(want, stderr); diff != "" {
		t.Errorf("stderr mismatch (-want +got):\n%s", diff)
	}
}

func TestPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"listen", []string{"--listen", addr, "--admin", ""}},
		{"admin", []string{"--listen", "127.0.0.1:0", "--admin", addr}},
		{"probe", []string{"--listen", "127.0.0.1:0", "--admin", "", "--probe-listen", addr}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runArgs(t, append(tt.args, "--upstream", "127.0.0.1:1")...)
			if code != exitError {
				t.Errorf("exit code = %d, want %d", code, exitError)
			}
			if !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, addr) ||
				strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr = %q, want one line naming %s in use", stderr, addr)
			}
		})
	}
}

// TestRunUntilCancelled starts the relay on free ports in front of a real
// upstream, checks the admin server and readiness, opens an xDS stream,
// cancels the context (as SIGTERM does in main) and expects the stream to end
// with UNAVAILABLE and a clean exit.
func TestRunUntilCancelled(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	file := writeFile(t, "shutdown: {drain_window: 200ms}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := newSyncBuffer()
	var stdout bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", file, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--upstream", up.Addr(), "--log-level", "debug"}, &stdout, stderr)
	}()

	wait, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	var line []byte
	select {
	case line = <-stderr.serving:
	case code := <-done:
		t.Fatalf("run returned %d before serving; stderr:\n%s", code, stderr)
	case <-wait.Done():
		t.Fatalf("no serving log line within 10s; stderr:\n%s", stderr)
	}
	var serving struct{ Listen, Admin string }
	if err := json.Unmarshal(line, &serving); err != nil {
		t.Fatalf("serving log line %q: %v", line, err)
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(wait, http.MethodGet, "http://"+serving.Admin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if got, _ := get("/healthz"); got != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", got)
	}
	// Ready once serving and synced with the upstream: poll.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			break
		}
		if !strings.HasPrefix(body, "starting") && !strings.HasPrefix(body, "not synced") {
			t.Fatalf("/readyz = %d %q, want a reason", code, body)
		}
		select {
		case <-tick.C:
		case <-wait.Done():
			t.Fatalf("/readyz not 200 within 10s; stderr:\n%s", stderr)
		}
	}
	c := xdstest.DialADS(t, serving.Listen, &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "c1")
	c.Ack(c.RecvType(resource.ClusterType))

	cancel()
	if err := c.Err(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stream ended with %v, want UNAVAILABLE", err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit code = %d, want 0; stderr:\n%s", code, stderr)
		}
	case <-wait.Done():
		t.Fatalf("run did not return within 10s of cancel; stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no stopped log line; stderr:\n%s", stderr)
	}
}

// POST /drain takes the relay out of service and DELETE /drain puts it
// back, the process running throughout: /readyz 503 then 200, a new xDS
// stream refused with UNAVAILABLE then served, REST-JSON polls 503 then
// answered (its listener stays open). The signal then shuts down as usual.
func TestDrainAndUndrain(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	r := startRun(t, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
		"--upstream", up.Addr())
	admin := "http://" + r.Admin
	xdstest.Eventually(t, func() bool { code, _ := call(t, http.MethodGet, admin+"/readyz"); return code == http.StatusOK },
		"ready", nil)
	poll := func() int {
		t.Helper()
		res, err := http.Post("http://"+r.Rest+"/v3/discovery:clusters", "application/json",
			strings.NewReader(`{"node": {"id": "poller"}, "resource_names": ["c1"]}`))
		if err != nil {
			t.Fatalf("REST poll: %v", err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	if code, body := call(t, http.MethodPost, admin+"/drain"); code != http.StatusAccepted {
		t.Fatalf("POST /drain = %d %q, want 202", code, body)
	}
	if code, _ := call(t, http.MethodGet, admin+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while drained = %d, want 503", code)
	}
	refused := xdstest.DialADS(t, r.Listen, &core.Node{Id: "refused"})
	if err := refused.Err(); status.Code(err) != codes.Unavailable {
		t.Errorf("a new xDS stream while drained ended with %v, want UNAVAILABLE", err)
	}
	if code := poll(); code != http.StatusServiceUnavailable {
		t.Errorf("REST poll while drained = %d, want 503", code)
	}

	if code, body := call(t, http.MethodDelete, admin+"/drain"); code != http.StatusOK {
		t.Fatalf("DELETE /drain = %d %q, want 200", code, body)
	}
	if code, body := call(t, http.MethodGet, admin+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after DELETE /drain = %d %q, want 200", code, body)
	}
	c := xdstest.DialADS(t, r.Listen, &core.Node{Id: "back"})
	c.Subscribe(resource.ClusterType, "c1")
	c.Ack(c.RecvType(resource.ClusterType))
	if code := poll(); code != http.StatusOK {
		t.Errorf("REST poll after DELETE /drain = %d, want 200", code)
	}
	if code := r.stop(); code != exitOK {
		t.Errorf("exit code = %d, want 0; stderr:\n%s", code, r.stderr)
	}
	http.DefaultClient.CloseIdleConnections()
	for _, want := range []string{`"msg":"admin call","method":"POST","path":"/drain"`,
		`"msg":"admin call","method":"DELETE","path":"/drain"`} {
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("no log line %s; stderr:\n%s", want, r.stderr)
		}
	}
}
