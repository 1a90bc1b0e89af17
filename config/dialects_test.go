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
		{"rest without listen", withServer(func(c *config.Config) { c.REST = &config.REST{} }),
			"rest.listen", "config: rest.listen: must be set (host:port)"},
		{"rest listen", withServer(func(c *config.Config) { c.REST = &config.REST{Listen: "8080"} }),
			"rest.listen", `config: rest.listen: must be host:port, got "8080"`},
		{"rest timeout", withServer(func(c *config.Config) { c.REST = &config.REST{Listen: ":8080", PollTimeout: -1} }),
			"rest.poll_timeout", "config: rest.poll_timeout: must not be negative"},
		{"gateway field", withServer(func(c *config.Config) { c.Gateway = &config.Gateway{GroupBy: []string{"cluster", "zone"}} }),
			"gateway.group_by[1]", `config: gateway.group_by[1]: unknown field "zone" (want node_id, cluster or supported_features)`},
		{"gateway retries", withServer(func(c *config.Config) { c.Gateway = &config.Gateway{ReportRetries: -1} }),
			"gateway.report_retries", "config: gateway.report_retries: must not be negative"},
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
