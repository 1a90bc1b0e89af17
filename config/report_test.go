package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
)

// report is what `xds-relay validate` prints for a file: ParseAll's errors and
// Validate's, joined by Locations.Report, one line each.
func report(t *testing.T, yaml string) []string {
	t.Helper()
	cfg, locs, err := config.ParseAll([]byte(yaml))
	if cfg == nil {
		t.Fatalf("ParseAll: no Config (error %v)", err)
	}
	got := locs.Report(err, cfg.Validate())
	if got == nil {
		return nil
	}
	return strings.Split(got.Error(), "\n")
}

// The file's unknown keys and bad values and Validate's problems with the
// rest are reported together, each with its line.
func TestReportEveryErrorAtOnce(t *testing.T) {
	got := report(t, `listne: x
upstream:
  linger: soon
  xds_servers:
    - server_uri: nope
      channel_creds: [{type: insecure}]
limits:
  max_recv_message_bytes: 10
rollout: {hold: 0s}
node:
  id: ""
`)
	want := []string{
		"config: listne: unknown field (line 1)",
		`config: upstream.linger: must be a duration like "5s" (line 3)`,
		"config: rollout.hold: must be positive, got 0s (to turn rollouts off, remove the rollout section) (line 9)",
		"config: node.id: must not be empty (line 11)",
		"config: limits.max_recv_message_bytes: must be at least 65536 (a request carries the client's node), got 10 (line 8)",
		`config: upstream.xds_servers[0].server_uri: must be host:port, got "nope" (line 5)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report mismatch (-want +got):\n%s", diff)
	}
}

func TestReportLines(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"valid", "upstream: {xds_servers: [{server_uri: 'a:1'}]}\n", nil},
		// A field the file lacks takes the line of its section.
		{"absent field, present section", "listen: ':1'\nupstream:\n  linger: 1s\n",
			[]string{"config: upstream.xds_servers: at least one server is required (line 2)"}},
		{"absent section", "listen: ':1'\n",
			[]string{"config: upstream.xds_servers: at least one server is required"}},
		// A value reported as the wrong kind is not reported again for the
		// default it was left at.
		{"bad value reported once", "upstream: {xds_servers: {server_uri: 'a:1'}}\n",
			[]string{"config: upstream.xds_servers: must be a list (line 1)"}},
		{"bad list element reported once", "upstream:\n  xds_servers:\n    - 'a:1'\n    - server_uri: b\n",
			[]string{
				"config: upstream.xds_servers[0]: must be a mapping (line 3)",
				`config: upstream.xds_servers[1].server_uri: must be host:port, got "b" (line 4)`,
			}},
		{"authority", "upstream:\n  xds_servers: [{server_uri: 'a:1'}]\n  authorities:\n    a.example:\n      xds_servers:\n        - server_uri: nope\n",
			[]string{`config: upstream.authorities["a.example"].xds_servers[0].server_uri: must be host:port, got "nope" (line 6)`}},
		{"unknown key beside a good one", "upstream:\n  xds_server: []\n  linger: -1s\n",
			[]string{
				"config: upstream.xds_server: unknown field (line 2)",
				"config: upstream.linger: must not be negative (line 3)",
				"config: upstream.xds_servers: at least one server is required (line 1)",
			}},
		{"bad value behind an alias", "node: &n {id: a}\nlisten: *n\nupstream: {xds_servers: [{server_uri: 'a:1'}]}\nadmin: x\n",
			[]string{
				"config: listen: must be a string (line 2)",
				`config: admin: must be host:port, got "x" (line 4)`,
			}},
		{"keying", "upstream: {xds_servers: [{server_uri: 'a:1'}]}\nkeying:\n  group_by: [cluster, colour]\n",
			[]string{`config: keying.group_by[1]: unknown node field "colour" (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY) (line 3)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, report(t, tt.yaml)); diff != "" {
				t.Errorf("report mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// The good keys of a file with bad ones are decoded; the bad ones keep their
// defaults.
func TestParseAllKeepsTheRest(t *testing.T) {
	cfg, _, err := config.ParseAll([]byte("listen: [x]\nadmin: ''\nnode: {idd: a, cluster: c}\n"))
	if err == nil || cfg == nil {
		t.Fatalf("ParseAll = %v, %v; want a Config and an error", cfg, err)
	}
	want := config.Default()
	want.Admin = ""
	want.Node.Cluster = "c"
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("Config mismatch (-want +got):\n%s", diff)
	}
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "listen" || fe.Line != 1 {
		t.Errorf("first error = %#v, want listen at line 1", fe)
	}
	// Parse keeps its contract: no Config with an error.
	if cfg, err := config.Parse([]byte("listen: [x]\n")); cfg != nil || err == nil {
		t.Errorf("Parse = %v, %v; want nil and an error", cfg, err)
	}
	// A syntax error leaves nothing to decode.
	if cfg, _, err := config.ParseAll([]byte("a: [\n")); cfg != nil || err == nil {
		t.Errorf("ParseAll(syntax error) = %v, %v; want nil and an error", cfg, err)
	}
}

// A field a flag set is not the file's: its problems name no line.
func TestLocationsForget(t *testing.T) {
	cfg, locs, err := config.ParseAll([]byte("listen: ':1'\nupstream:\n  xds_servers: [{server_uri: 'a:1'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := locs.Line("upstream.xds_servers[0].server_uri"); got != 3 {
		t.Errorf("Line(server_uri) = %d, want 3", got)
	}
	locs.Forget("listen")
	locs.Forget("upstream.xds_servers")
	if got := locs.Line("upstream.xds_servers[0].server_uri"); got != 2 {
		t.Errorf("Line(server_uri) after Forget = %d, want 2 (upstream)", got)
	}
	cfg.Listen = "nope"
	got := locs.Report(nil, cfg.Validate())
	if want := `config: listen: must be host:port, got "nope"`; got == nil || got.Error() != want {
		t.Errorf("Report = %v, want %q", got, want)
	}
}
