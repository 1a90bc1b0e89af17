package config_test

import (
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/config"
)

// FuzzParse checks that Parse and Validate never panic, that their errors are
// one line per problem, each naming the config, and that a config that
// validates has a server.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"listen: ':18001'\nadmin: ''\n",
		"upstream:\n  xds_servers:\n    - server_uri: 'a:1'\n      channel_creds: [{type: insecure}]\n",
		"upstream: {authorities: {x: {xds_servers: [{server_uri: 'b:2', channel_creds: [{type: tls, config: {a: b}}]}]}}}\n",
		"node: &n {id: a, metadata: {k: v}}\nlisten: *n\n",
		"node:\n  <<: [{id: a}, {cluster: b}]\n",
		"a: &a [*a]\n",
		"upstream: {linger: -5s}\ncache: {max_unreferenced: -1, persist_path: x}\nkeying:\nrollout: {}\ntls: []\n",
		"limits: {max_names_per_request: 0x10, max_recv_message_bytes: 1e3}\n",
		"---\n...\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data)
		if err != nil {
			if cfg != nil {
				t.Errorf("Parse returned a config and an error %v", err)
			}
			checkLines(t, "Parse", err)
			return
		}
		if err := cfg.Validate(); err != nil {
			checkLines(t, "Validate", err)
			return
		}
		if len(cfg.Upstream.XDSServers) == 0 {
			t.Errorf("Validate accepted a config without servers: %q", data)
		}
	})
}

// checkLines checks that every line of err is one problem, "config: ...".
func checkLines(t *testing.T, what string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "config: ") {
			t.Errorf("%s error line %q does not start with \"config: \" (in %q)", what, line, err)
		}
	}
}
