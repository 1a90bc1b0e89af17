package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
)

func TestDefault(t *testing.T) {
	want := &config.Config{
		Listen: ":18001",
		Admin:  "127.0.0.1:9902",
		Node:   config.Node{ID: "xds-relay", Cluster: "xds-relay"},
		Upstream: config.Upstream{
			Linger:            5 * time.Second,
			UnavailableAfter:  10 * time.Second,
			DoesNotExistAfter: 15 * time.Second,
			MoveWait:          time.Second,
		},
		Cache:    config.Cache{MaxUnreferenced: 10000, PersistInterval: time.Second},
		Shutdown: config.Shutdown{DrainWindow: 5 * time.Second},
		Limits: config.Limits{MaxNamesPerRequest: 100000, MaxRecvMessageBytes: 4 << 20, MaxSubscriptionsPerStream: 100000,
			MaxStreamsPerConnection: 100, NewStreamsPerSecond: 5000, MaxConnectionAge: 30 * time.Minute, KeepaliveMinTime: 10 * time.Second},
	}
	if diff := cmp.Diff(want, config.Default()); diff != "" {
		t.Errorf("Default() mismatch (-want +got):\n%s", diff)
	}
}

// withServer is Default with one default upstream server.
func withServer(f func(c *config.Config)) *config.Config {
	c := config.Default()
	c.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:18000"}}
	if f != nil {
		f(c)
	}
	return c
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *config.Config
	}{
		{name: "empty", yaml: "", want: config.Default()},
		{name: "comment only", yaml: "# nothing\n", want: config.Default()},
		{name: "null document", yaml: "---\n", want: config.Default()},
		{name: "null value keeps default", yaml: "listen:\nupstream:\n  xds_servers: [{server_uri: '127.0.0.1:18000'}]\n",
			want: withServer(nil)},
		{
			name: "contract example without later sections",
			yaml: `
listen: ":18001"
admin: "127.0.0.1:9902"
node:
  id: "xds-relay-1"
  cluster: "xds-relay"
  metadata: {zone: a}
upstream:
  xds_servers:
    - server_uri: "127.0.0.1:18000"
      channel_creds: [{type: insecure}]
      server_features: [xds_v3]
  authorities:
    "auth.example":
      xds_servers:
        - server_uri: "127.0.0.1:18010"
    "other.example": {}
  linger: 1m30s
cache:
  max_unreferenced: 0
  persist_path: ""
limits:
  max_names_per_request: 100
  max_recv_message_bytes: 1048576
`,
			want: &config.Config{
				Listen: ":18001",
				Admin:  "127.0.0.1:9902",
				Node:   config.Node{ID: "xds-relay-1", Cluster: "xds-relay", Metadata: map[string]string{"zone": "a"}},
				Upstream: config.Upstream{
					XDSServers: []config.Server{{
						ServerURI:      "127.0.0.1:18000",
						ChannelCreds:   []config.ChannelCreds{{Type: "insecure"}},
						ServerFeatures: []string{"xds_v3"},
					}},
					Authorities: map[string]config.Authority{
						"auth.example":  {XDSServers: []config.Server{{ServerURI: "127.0.0.1:18010"}}},
						"other.example": {},
					},
					Linger:            90 * time.Second,
					UnavailableAfter:  10 * time.Second,
					DoesNotExistAfter: 15 * time.Second,
					MoveWait:          time.Second,
				},
				Cache:    config.Cache{MaxUnreferenced: 0, PersistInterval: time.Second},
				Shutdown: config.Shutdown{DrainWindow: 5 * time.Second},
				Limits: config.Limits{MaxNamesPerRequest: 100, MaxRecvMessageBytes: 1 << 20, MaxSubscriptionsPerStream: 100000,
					MaxStreamsPerConnection: 100, NewStreamsPerSecond: 5000, MaxConnectionAge: 30 * time.Minute, KeepaliveMinTime: 10 * time.Second},
			},
		},
		// An explicit zero is kept; an absent key takes the default.
		{name: "explicit zeros", yaml: "rollout: {canary_fraction: 0, hold: 0s}\nshutdown: {drain_window: 0s}\ncache: {max_unreferenced: 0}\nupstream: {linger: 0s}\n",
			want: func() *config.Config {
				c := config.Default()
				c.Upstream.Linger = 0
				c.Rollout = &config.Rollout{}
				c.Shutdown.DrainWindow = 0
				c.Cache.MaxUnreferenced = 0
				return c
			}()},
		{name: "rollout defaults for absent keys", yaml: "rollout: {max_nack_ratio: 0.5}\n",
			want: func() *config.Config {
				c := config.Default()
				c.Rollout = &config.Rollout{CanaryFraction: 0.1, Hold: 2 * time.Second, MaxNACKRatio: 0.5}
				return c
			}()},
		{name: "empty rollout section", yaml: "rollout:\n",
			want: func() *config.Config {
				c := config.Default()
				c.Rollout = &config.Rollout{CanaryFraction: 0.1, Hold: 2 * time.Second}
				return c
			}()},
		{name: "readiness and shutdown", yaml: "readiness: {require_sync: true}\nshutdown: {drain_window: 30s}\n",
			want: func() *config.Config {
				c := config.Default()
				c.Readiness.RequireSync = true
				c.Shutdown.DrainWindow = 30 * time.Second
				return c
			}()},
		{name: "admin empty disables", yaml: "admin: ''\n",
			want: func() *config.Config { c := config.Default(); c.Admin = ""; return c }()},
		{name: "probe listener", yaml: "probe_listen: ':9903'\n",
			want: func() *config.Config { c := config.Default(); c.ProbeListen = ":9903"; return c }()},
		{name: "partial node keeps other defaults", yaml: "node: {id: r2}\n",
			want: func() *config.Config { c := config.Default(); c.Node.ID = "r2"; return c }()},
		{name: "anchors and aliases", yaml: "upstream:\n  xds_servers: [&s {server_uri: 'a:1'}]\n  authorities: {x: {xds_servers: [*s]}}\n",
			want: func() *config.Config {
				c := config.Default()
				c.Upstream.XDSServers = []config.Server{{ServerURI: "a:1"}}
				c.Upstream.Authorities = map[string]config.Authority{"x": {XDSServers: []config.Server{{ServerURI: "a:1"}}}}
				return c
			}()},
		{name: "merge key", yaml: "node:\n  <<: {id: a}\n  cluster: c\n",
			want: func() *config.Config { c := config.Default(); c.Node = config.Node{ID: "a", Cluster: "c"}; return c }()},
		{name: "empty section is present", yaml: "keying:\n",
			want: func() *config.Config { c := config.Default(); c.Keying = &config.Keying{}; return c }()},
		{name: "later sections decode", yaml: "rollout: {hold: 2s}\ntls: {cert_file: a.pem}\n",
			want: func() *config.Config {
				c := config.Default()
				c.Rollout = &config.Rollout{Hold: 2 * time.Second, CanaryFraction: 0.1}
				c.TLS = &config.TLS{CertFile: "a.pem"}
				return c
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown top-level key", "listne: ':1'\n", "config: listne: unknown field (line 1)"},
		{"unknown nested key", "upstream:\n  xds_servers:\n    - server_uri: 'a:1'\n      srv: 2\n",
			"config: upstream.xds_servers[0].srv: unknown field (line 4)"},
		{"unknown key in authority", "upstream:\n  authorities:\n    a.example:\n      servers: []\n",
			`config: upstream.authorities["a.example"].servers: unknown field (line 4)`},
		{"unknown key in channel creds", "upstream: {xds_servers: [{server_uri: 'a:1', channel_creds: [{typ: insecure}]}]}\n",
			"config: upstream.xds_servers[0].channel_creds[0].typ: unknown field (line 1)"},
		{"unknown key behind merge", "node:\n  <<: {idd: x}\n",
			"config: node.idd: unknown field (line 2)"},
		{"duration as integer", "upstream:\n  linger: 5\n", `config: upstream.linger: must be a duration like "5s" (line 2)`},
		{"bad duration", "upstream: {linger: soon}\n", `config: upstream.linger: must be a duration like "5s" (line 1)`},
		{"string as list", "listen: [a]\n", "config: listen: must be a string (line 1)"},
		{"integer expected", "limits:\n  max_names_per_request: many\n",
			"config: limits.max_names_per_request: must be an integer (line 2)"},
		{"servers not a list", "upstream: {xds_servers: {server_uri: 'a:1'}}\n", "config: upstream.xds_servers: must be a list (line 1)"},
		{"section not a mapping", "node: x\n", "config: node: must be a mapping (line 1)"},
		{"metadata values", "node: {metadata: {a: [1]}}\n", "config: node.metadata: must be a mapping of strings (line 1)"},
		{"features", "upstream: {xds_servers: [{server_uri: 'a:1', server_features: x}]}\n",
			"config: upstream.xds_servers[0].server_features: must be a list of strings (line 1)"},
		{"top level not a mapping", "- a\n", "config: (top level): must be a mapping (line 1)"},
		{"alias points at bad value", "node: &n {id: a}\nlisten: *n\n", "config: listen: must be a string (line 2)"},
		{"syntax", "a: [\n", "config: line 1: did not find expected node content"},
		{"two documents", "listen: ':1'\n---\nadmin: ''\n", "config: line 2: more than one YAML document"},
		{"duplicate key", "listen: ':1'\nlisten: ':2'\n", `config: line 2: mapping key "listen" already defined at line 1`},
		{"bootstrap and servers", "upstream: {bootstrap_file: b.json, xds_servers: [{server_uri: 'a:1'}]}\n",
			"config: upstream.bootstrap_file: set either bootstrap_file or xds_servers and authorities, not both"},
		{"missing bootstrap", "upstream: {bootstrap_file: /nonexistent/b.json}\n",
			"config: upstream.bootstrap_file: open /nonexistent/b.json: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse = %+v, want error %q", got, tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
		})
	}
}

// Parse reports every unknown key and bad value, one line each.
func TestParseReportsEveryError(t *testing.T) {
	_, err := config.Parse([]byte("listne: x\nnode: {idd: a}\nupstream: {linger: soon}\n"))
	want := []string{
		"config: listne: unknown field (line 1)",
		"config: node.idd: unknown field (line 2)",
		`config: upstream.linger: must be a duration like "5s" (line 3)`,
	}
	if err == nil {
		t.Fatal("Parse: no error")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("upstream:\n  xds_servers: [{server_uri: '127.0.0.1:18000'}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(good)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(withServer(nil), got); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(bad)
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "listen" {
		t.Errorf("Load(bad) = %v, want a *FieldError for listen", err)
	}
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(bad) = %v, want the file name in it", err)
	}

	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
}
