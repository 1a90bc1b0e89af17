package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
)

func TestValidateOK(t *testing.T) {
	tests := []struct {
		name string
		cfg  *config.Config
	}{
		{"one server", withServer(nil)},
		{"admin disabled", withServer(func(c *config.Config) { c.Admin = "" })},
		{"probe listener", withServer(func(c *config.Config) { c.ProbeListen = ":9903" })},
		{"listen any port", withServer(func(c *config.Config) { c.Listen = "127.0.0.1:0" })},
		{"ipv6", withServer(func(c *config.Config) {
			c.Listen = "[::1]:18001"
			c.Upstream.XDSServers[0].ServerURI = "[::1]:18000"
		})},
		{"dns name and fallback", withServer(func(c *config.Config) {
			c.Upstream.XDSServers = append(c.Upstream.XDSServers, config.Server{
				ServerURI:    "cp.example.com:443",
				ChannelCreds: []config.ChannelCreds{{Type: "insecure"}},
			})
		})},
		{"authority with and without servers", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{
				"a.example": {XDSServers: []config.Server{{ServerURI: "127.0.0.1:18010"}}},
				"b.example": {},
			}
		})},
		{"zero linger, cache and drain window", withServer(func(c *config.Config) {
			c.Upstream.Linger = 0
			c.Cache.MaxUnreferenced = 0
			c.Shutdown.DrainWindow = 0
		})},
		{"zero canary fraction", withServer(func(c *config.Config) {
			c.Rollout = &config.Rollout{CanaryFraction: 0, Hold: time.Second}
		})},
		// gRPC bootstrap: unknown channel_creds types are skipped, the first
		// supported one is used.
		{"unknown creds skipped", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "insecure"}, {Type: "alts"}}
		})},
		{"unknown creds first", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "alts"}, {Type: "google_default"}}
		})},
		{"tls with the system roots", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "tls"}}
		})},
		{"grpc targets", withServer(func(c *config.Config) {
			c.Upstream.XDSServers = []config.Server{
				{ServerURI: "dns:///cp.example:443"}, {ServerURI: "passthrough:///10.0.0.1:18000"},
				{ServerURI: "unix:///run/xds.sock"}, {ServerURI: "unix:relative.sock"},
			}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   *config.Config
		field string
		want  string
	}{
		{"no servers", config.Default(), "upstream.xds_servers",
			"config: upstream.xds_servers: at least one server is required"},
		{"server without port", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = "localhost" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: must be host:port, got "localhost"`},
		{"server without host", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = ":18000" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: must be host:port with a host, got ":18000"`},
		{"server with unknown scheme", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = "http://cp:18000" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: unsupported scheme "http" (want host:port, dns:///host:port, passthrough:///host:port or unix:PATH)`},
		{"dns target without port", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = "dns:///cp" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: must be host:port, got "cp"`},
		{"server with path", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = "cp/x:18000" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: must be host:port without a scheme or spaces, got "cp/x:18000"`},
		{"server port zero", withServer(func(c *config.Config) { c.Upstream.XDSServers[0].ServerURI = "cp:0" }),
			"upstream.xds_servers[0].server_uri",
			`config: upstream.xds_servers[0].server_uri: must be host:port with a port number, got "cp:0"`},
		{"second server", withServer(func(c *config.Config) {
			c.Upstream.XDSServers = append(c.Upstream.XDSServers, config.Server{ServerURI: "cp:http"})
		}), "upstream.xds_servers[1].server_uri",
			`config: upstream.xds_servers[1].server_uri: must be host:port with a port number, got "cp:http"`},
		{"no supported creds", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "alts"}, {Type: "xds"}}
		}), "upstream.xds_servers[0].channel_creds",
			`config: upstream.xds_servers[0].channel_creds: no supported type (want insecure, tls or google_default; others are skipped)`},
		{"empty creds type", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{}}
		}), "upstream.xds_servers[0].channel_creds[0].type",
			"config: upstream.xds_servers[0].channel_creds[0].type: must be set (insecure, tls or google_default)"},
		{"call creds on plaintext", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].CallCreds = []config.CallCreds{{Type: "jwt_token_file",
				Config: map[string]any{"jwt_token_file": "validate_test.go"}}}
		}), "upstream.xds_servers[0].call_creds",
			"config: upstream.xds_servers[0].call_creds: need tls channel_creds: call credentials are sent over a secure channel only"},
		{"call creds without file", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "tls"}}
			c.Upstream.XDSServers[0].CallCreds = []config.CallCreds{{Type: "jwt_token_file"}}
		}), "upstream.xds_servers[0].call_creds[0].config.jwt_token_file",
			"config: upstream.xds_servers[0].call_creds[0].config.jwt_token_file: required for type jwt_token_file"},
		{"call creds missing file", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "tls"}}
			c.Upstream.XDSServers[0].CallCreds = []config.CallCreds{{Type: "jwt_token_file",
				Config: map[string]any{"jwt_token_file": "/nonexistent/token"}}}
		}), "upstream.xds_servers[0].call_creds[0].config.jwt_token_file",
			"config: upstream.xds_servers[0].call_creds[0].config.jwt_token_file: open /nonexistent/token: no such file or directory"},
		{"empty authority name", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{"": {}}
		}), `upstream.authorities[""]`, `config: upstream.authorities[""]: authority name must not be empty`},
		{"authority name with slash", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{"a/b": {}}
		}), `upstream.authorities["a/b"]`,
			`config: upstream.authorities["a/b"]: authority name must not contain '/', '?' or '#'`},
		{"authority server", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{
				"a.example": {},
				"b.example": {XDSServers: []config.Server{{ServerURI: "nope"}}},
			}
		}), `upstream.authorities["b.example"].xds_servers[0].server_uri`,
			`config: upstream.authorities["b.example"].xds_servers[0].server_uri: must be host:port, got "nope"`},
		{"authority tls", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{
				"a.example": {XDSServers: []config.Server{{ServerURI: "a:1", ChannelCreds: []config.ChannelCreds{
					{Type: "tls", Config: map[string]any{"private_key_file": "k.pem"}}}}}},
			}
		}), `upstream.authorities["a.example"].xds_servers[0].channel_creds[0].config.certificate_file`,
			`config: upstream.authorities["a.example"].xds_servers[0].channel_creds[0].config.certificate_file: required with private_key_file`},
		{"negative linger", withServer(func(c *config.Config) { c.Upstream.Linger = -1 }),
			"upstream.linger", "config: upstream.linger: must not be negative"},
		{"negative cache", withServer(func(c *config.Config) { c.Cache.MaxUnreferenced = -1 }),
			"cache.max_unreferenced", "config: cache.max_unreferenced: must not be negative (0 keeps none)"},
		{"negative persist interval", withServer(func(c *config.Config) { c.Cache.PersistInterval = -time.Second }),
			"cache.persist_interval", "config: cache.persist_interval: must not be negative (0 is the default, 1s)"},
		{"negative drain window", withServer(func(c *config.Config) { c.Shutdown.DrainWindow = -time.Second }),
			"shutdown.drain_window", "config: shutdown.drain_window: must not be negative (0 ends every stream at once)"},
		{"persist path and no LRU", withServer(func(c *config.Config) {
			c.Cache.PersistPath = "validate_test.go"
			c.Cache.MaxUnreferenced = 0
		}), "cache.max_unreferenced", "config: cache.max_unreferenced: must be positive with cache.persist_path: " +
			"nothing is watched when the warm-restart file is loaded, and 0 keeps none of it"},
		{"zero unavailable_after", withServer(func(c *config.Config) { c.Upstream.UnavailableAfter = 0 }),
			"upstream.unavailable_after", "config: upstream.unavailable_after: must be positive, got 0s"},
		{"zero move_wait", withServer(func(c *config.Config) { c.Upstream.MoveWait = 0 }),
			"upstream.move_wait", "config: upstream.move_wait: must be positive, got 0s"},
		{"persist path", withServer(func(c *config.Config) { c.Cache.PersistPath = "/nonexistent-dir/cache" }),
			"cache.persist_path", `config: cache.persist_path: directory of "/nonexistent-dir/cache" does not exist`},
		{"names limit", withServer(func(c *config.Config) { c.Limits.MaxNamesPerRequest = 0 }),
			"limits.max_names_per_request", "config: limits.max_names_per_request: must be positive"},
		{"subscription limit", withServer(func(c *config.Config) { c.Limits.MaxSubscriptionsPerStream = 0 }),
			"limits.max_subscriptions_per_stream", "config: limits.max_subscriptions_per_stream: must be positive"},
		{"stream rate", withServer(func(c *config.Config) { c.Limits.NewStreamsPerSecond = -1 }),
			"limits.new_streams_per_second", "config: limits.new_streams_per_second: must not be negative (0 disables it)"},
		{"message limit", withServer(func(c *config.Config) { c.Limits.MaxRecvMessageBytes = -1 }),
			"limits.max_recv_message_bytes", "config: limits.max_recv_message_bytes: must be at least 65536 (a request carries the client's node), got -1"},
		{"tiny message limit", withServer(func(c *config.Config) { c.Limits.MaxRecvMessageBytes = 10 }),
			"limits.max_recv_message_bytes", "config: limits.max_recv_message_bytes: must be at least 65536 (a request carries the client's node), got 10"},
		{"group_by field", withServer(func(c *config.Config) { c.Keying = &config.Keying{GroupBy: []string{"cluster", "colour"}} }),
			"keying.group_by[1]", `config: keying.group_by[1]: unknown node field "colour" (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY)`},
		{"dynamic parameters", withServer(func(c *config.Config) {
			c.Keying = &config.Keying{DynamicParametersFromNode: map[string]string{"env": "metadata.env", "zone": "zone"}}
		}), "keying.dynamic_parameters_from_node.zone", `config: keying.dynamic_parameters_from_node.zone: unknown node field "zone" (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY)`},
		{"rollout fraction", withServer(func(c *config.Config) { c.Rollout = &config.Rollout{CanaryFraction: 2, Hold: time.Second} }),
			"rollout.canary_fraction", "config: rollout.canary_fraction: must be in [0, 1] (0: one canary per change), got 2"},
		{"rollout hold", withServer(func(c *config.Config) { c.Rollout = &config.Rollout{CanaryFraction: 0.1} }),
			"rollout.hold", "config: rollout.hold: must be positive, got 0s (to turn rollouts off, remove the rollout section)"},
		{"listen", withServer(func(c *config.Config) { c.Listen = "18001" }),
			"listen", `config: listen: must be host:port, got "18001"`},
		{"listen empty", withServer(func(c *config.Config) { c.Listen = "" }),
			"listen", `config: listen: must be host:port, got ""`},
		{"admin", withServer(func(c *config.Config) { c.Admin = "localhost:99999" }),
			"admin", `config: admin: must be host:port with a port number, got "localhost:99999"`},
		{"probe_listen", withServer(func(c *config.Config) { c.ProbeListen = "9903" }),
			"probe_listen", `config: probe_listen: must be host:port, got "9903"`},
		{"node id", withServer(func(c *config.Config) { c.Node.ID = "" }),
			"node.id", "config: node.id: must not be empty"},
		{"nil", nil, "(top level)", "config: (top level): no configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %T, want *config.FieldError", err)
			}
			if fe.Field != tt.field {
				t.Errorf("FieldError.Field = %q, want %q", fe.Field, tt.field)
			}
		})
	}
}

// Validate reports every problem, not the first one only.
func TestValidateReportsEveryError(t *testing.T) {
	cfg := withServer(func(c *config.Config) {
		c.Listen = "nope"
		c.Node.ID = ""
		c.Limits.MaxNamesPerRequest = 0
		c.Upstream.XDSServers = append(c.Upstream.XDSServers, config.Server{ServerURI: "cp"})
	})
	err := cfg.Validate()
	want := []string{
		`config: listen: must be host:port, got "nope"`,
		"config: node.id: must not be empty",
		"config: limits.max_names_per_request: must be positive",
		`config: upstream.xds_servers[1].server_uri: must be host:port, got "cp"`,
	}
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", diff)
	}
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "listen" {
		t.Errorf("errors.As found %v, want the listen error first", fe)
	}
}

// TestParseThenValidate covers the loader and Validate together on YAML, as
// `xds-relay validate` uses them.
func TestParseThenValidate(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"valid", "upstream: {xds_servers: [{server_uri: 'cp:18000', channel_creds: [{type: insecure}]}]}\n", ""},
		{"keying section", "upstream: {xds_servers: [{server_uri: 'cp:1'}]}\nkeying:\n  group_by: [cluster, zone]\n",
			`config: keying.group_by[1]: unknown node field "zone" (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY)`},
		{"null servers", "upstream: {xds_servers: }\n", "config: upstream.xds_servers: at least one server is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err == nil {
				err = cfg.Validate()
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
