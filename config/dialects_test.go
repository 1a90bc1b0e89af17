package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
)

func TestDialectSections(t *testing.T) {
	cfg, err := config.Parse([]byte(`
upstream: {xds_servers: [{server_uri: "127.0.0.1:18000"}]}
rest: {listen: "127.0.0.1:18080", poll_timeout: 5s}
gateway: {group_by: [cluster, supported_features], report_retries: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := &config.REST{Listen: "127.0.0.1:18080", PollTimeout: 5 * time.Second}
	if d := cmp.Diff(want, cfg.REST); d != "" {
		t.Errorf("rest (-want +got):\n%s", d)
	}
	wantG := &config.Gateway{GroupBy: []string{"cluster", "supported_features"}, ReportRetries: 5}
	if d := cmp.Diff(wantG, cfg.Gateway); d != "" {
		t.Errorf("gateway (-want +got):\n%s", d)
	}
	if _, err := config.Parse([]byte("rest: {listen: x, poll: 1s}")); err == nil || err.Error() != "config: rest.poll: unknown field (line 1)" {
		t.Errorf("unknown key: %v", err)
	}
}

func TestDialectErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   *config.Config
		field string
		want  string
	}{
		{"rest without listen", withServer(func(c *config.Config) { c.REST = &config.REST{PollTimeout: time.Second} }),
			"rest.listen", "config: rest.listen: must be set (host:port)"},
		{"rest listen", withServer(func(c *config.Config) { c.REST = &config.REST{Listen: "8080", PollTimeout: time.Second} }),
			"rest.listen", `config: rest.listen: must be host:port, got "8080"`},
		{"rest timeout", withServer(func(c *config.Config) { c.REST = &config.REST{Listen: ":8080", PollTimeout: -1} }),
			"rest.poll_timeout", "config: rest.poll_timeout: must be positive, got -1ns (how long a poll with nothing new is held)"},
		{"rest timeout zero", withServer(func(c *config.Config) { c.REST = &config.REST{Listen: ":8080"} }),
			"rest.poll_timeout", "config: rest.poll_timeout: must be positive, got 0s (how long a poll with nothing new is held)"},
		{"gateway field", withServer(func(c *config.Config) {
			c.Gateway = &config.Gateway{GroupBy: []string{"cluster", "zone"}, ReportRetries: 1}
		}), "gateway.group_by[1]", `config: gateway.group_by[1]: unknown field "zone" (want node_id, cluster or supported_features)`},
		{"gateway retries", withServer(func(c *config.Config) { c.Gateway = &config.Gateway{ReportRetries: -1} }),
			"gateway.report_retries", "config: gateway.report_retries: must be positive, got -1 (attempts to forward one status report)"},
		{"gateway retries zero", withServer(func(c *config.Config) { c.Gateway = &config.Gateway{} }),
			"gateway.report_retries", "config: gateway.report_retries: must be positive, got 0 (attempts to forward one status report)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

// Issue 14's rule in the rest and gateway sections: a key the section
// leaves out takes its default, one it sets keeps its value — an empty
// group_by is one group, a zero poll_timeout or report_retries an error,
// never silently the default.
func TestDialectSectionsKeepWhatIsWritten(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		rest    *config.REST
		gateway *config.Gateway
		err     string
	}{
		{name: "absent keys take defaults", yaml: "rest: {listen: ':1'}\ngateway: {}\n",
			rest:    &config.REST{Listen: ":1", PollTimeout: 30 * time.Second},
			gateway: &config.Gateway{GroupBy: []string{"cluster"}, ReportRetries: 3}},
		{name: "empty sections", yaml: "gateway:\n", gateway: &config.Gateway{GroupBy: []string{"cluster"}, ReportRetries: 3}},
		{name: "empty group_by is kept", yaml: "gateway: {group_by: []}\n",
			gateway: &config.Gateway{GroupBy: []string{}, ReportRetries: 3}},
		{name: "zero poll_timeout", yaml: "rest: {listen: ':1', poll_timeout: 0s}\n",
			err: "config: rest.poll_timeout: must be positive, got 0s (how long a poll with nothing new is held)"},
		{name: "zero report_retries", yaml: "gateway: {report_retries: 0}\n",
			err: "config: gateway.report_retries: must be positive, got 0 (attempts to forward one status report)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte("upstream: {xds_servers: [{server_uri: 'a:1'}]}\n" + tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("Validate() = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.rest, cfg.REST); d != "" {
				t.Errorf("rest (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.gateway, cfg.Gateway); d != "" {
				t.Errorf("gateway (-want +got):\n%s", d)
			}
			if g := cfg.Gateway; g != nil && g.GroupBy == nil {
				t.Error("gateway.group_by is nil: the gateway would take its default, not what the file says")
			}
		})
	}
}
