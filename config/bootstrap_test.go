package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
)

// A real gRPC xDS bootstrap file (the shape GRPC_XDS_BOOTSTRAP names, with
// keys the relay ignores) is accepted as the upstream section.
const grpcBootstrap = `{
  "xds_servers": [
    {"server_uri": "cp.example:443",
     "channel_creds": [{"type": "alts"}, {"type": "tls", "config": {"refresh_interval": "1m"}}],
     "call_creds": [{"type": "sts"}, {"type": "jwt_token_file", "config": {"jwt_token_file": "TOKEN"}}],
     "server_features": ["xds_v3", "ignore_resource_deletion"]},
    {"server_uri": "dns:///fallback.example:18000", "channel_creds": [{"type": "insecure"}]}
  ],
  "node": {"id": "projects/1/networks/default/nodes/x", "locality": {"zone": "z1"}, "metadata": {"k": {"nested": true}}},
  "authorities": {
    "auth.example": {
      "client_listener_resource_name_template": "xdstp://auth.example/envoy.config.listener.v3.Listener/%s",
      "xds_servers": [{"server_uri": "auth.example:18010", "channel_creds": [{"type": "insecure"}]}]
    },
    "default.example": {}
  },
  "certificate_providers": {"default": {"plugin_name": "file_watcher", "config": {}}},
  "client_default_listener_resource_name_template": "%s",
  "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s"
}`

func writeBootstrap(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("a.b.c"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "TOKEN", token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBootstrapFile(t *testing.T) {
	path := writeBootstrap(t, grpcBootstrap)
	token := filepath.Join(filepath.Dir(path), "token")
	cfg, err := config.Parse([]byte("upstream: {bootstrap_file: " + path + ", linger: 7s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := config.Upstream{
		BootstrapFile: path,
		XDSServers: []config.Server{
			{
				ServerURI: "cp.example:443",
				ChannelCreds: []config.ChannelCreds{{Type: "alts"},
					{Type: "tls", Config: map[string]any{"refresh_interval": "1m"}}},
				CallCreds: []config.CallCreds{{Type: "sts"},
					{Type: "jwt_token_file", Config: map[string]any{"jwt_token_file": token}}},
				ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"},
			},
			{ServerURI: "dns:///fallback.example:18000", ChannelCreds: []config.ChannelCreds{{Type: "insecure"}}},
		},
		Authorities: map[string]config.Authority{
			"auth.example": {XDSServers: []config.Server{{ServerURI: "auth.example:18010",
				ChannelCreds: []config.ChannelCreds{{Type: "insecure"}}}}},
			"default.example": {XDSServers: []config.Server{}},
		},
		Linger:            7 * time.Second,
		UnavailableAfter:  10 * time.Second,
		DoesNotExistAfter: 15 * time.Second,
		MoveWait:          time.Second,
	}
	if diff := cmp.Diff(want, cfg.Upstream); diff != "" {
		t.Errorf("upstream mismatch (-want +got):\n%s", diff)
	}
	if sel, ok := cfg.Upstream.XDSServers[0].Selected(); !ok || sel.Type != "tls" {
		t.Errorf("Selected() = %v, %v; want the tls entry (alts is skipped)", sel, ok)
	}
}

// Errors in a bootstrap file name the file and the server's place in it.
func TestBootstrapFileErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"not JSON", "xds_servers: []", "config: upstream.bootstrap_file: PATH: not a gRPC xDS bootstrap (JSON): invalid character 'x' looking for beginning of value"},
		{"no servers", `{"node": {"id": "x"}}`, "config: upstream.bootstrap_file(PATH).xds_servers: at least one server is required"},
		{"bad server", `{"xds_servers": [{"server_uri": "cp", "channel_creds": [{"type": "insecure"}]}]}`,
			`config: upstream.bootstrap_file(PATH).xds_servers[0].server_uri: must be host:port, got "cp"`},
		{"no supported creds", `{"xds_servers": [{"server_uri": "cp:1", "channel_creds": [{"type": "alts"}]}]}`,
			"config: upstream.bootstrap_file(PATH).xds_servers[0].channel_creds: no supported type (want insecure, tls or google_default; others are skipped)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeBootstrap(t, tt.body)
			cfg, err := config.Parse([]byte("upstream: {bootstrap_file: " + path + "}\n"))
			if err == nil {
				err = cfg.Validate()
			}
			want := strings.ReplaceAll(tt.want, "PATH", path)
			if err == nil || err.Error() != want {
				t.Errorf("error = %v\nwant %s", err, want)
			}
		})
	}
}
