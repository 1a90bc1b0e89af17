package config_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// tlsFiles are valid and broken PEM files for the TLS tests.
type tlsFiles struct {
	dir                    string
	ca, cert, key          string // a CA and a certificate it signed, with its key
	otherKey               string // a key that is not cert's
	garbage, missing, keyC string // not PEM; absent; a certificate where a key belongs
}

func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "test-ca")
	f := tlsFiles{dir: dir}
	f.ca = xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())
	f.cert, f.key = ca.Server(t).Write(t, dir, "server")
	_, f.otherKey = ca.Server(t).Write(t, dir, "other")
	f.garbage = xdstest.WriteFile(t, dir, "garbage.pem", []byte("not a certificate\n"))
	f.missing = filepath.Join(dir, "missing.pem")
	f.keyC = f.cert
	return f
}

func TestParseTLS(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *config.TLS
	}{
		{"absent", "listen: ':1'\n", nil},
		{"full", "tls: {cert_file: s.pem, key_file: s-key.pem, client_ca_file: ca.pem}\n",
			&config.TLS{CertFile: "s.pem", KeyFile: "s-key.pem", ClientCAFile: "ca.pem"}},
		{"without client ca", "tls:\n  cert_file: s.pem\n  key_file: k.pem\n", &config.TLS{CertFile: "s.pem", KeyFile: "k.pem"}},
		{"empty section is present", "tls:\n", &config.TLS{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, cfg.TLS); diff != "" {
				t.Errorf("TLS mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTLSErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "tls: {cert_file: a, cert: b}\n", "config: tls.cert: unknown field (line 1)"},
		{"not a mapping", "tls: [a]\n", "config: tls: must be a mapping (line 1)"},
		{"not a string", "tls:\n  key_file: [a]\n", "config: tls.key_file: must be a string (line 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse = nil error, want %q", tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChannelCredsTLS(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]any
		want    config.TLSChannelCreds
		wantErr string
	}{
		{"ca only", map[string]any{"ca_certificate_file": "ca.pem"}, config.TLSChannelCreds{CACertificateFile: "ca.pem"}, ""},
		{"mtls", map[string]any{"ca_certificate_file": "ca.pem", "certificate_file": "c.pem", "private_key_file": "k.pem",
			"refresh_interval": "10m"},
			config.TLSChannelCreds{CACertificateFile: "ca.pem", CertificateFile: "c.pem", PrivateKeyFile: "k.pem",
				RefreshInterval: 10 * time.Minute}, ""},
		// gRFC A65: no files is TLS with the system roots.
		{"no config", nil, config.TLSChannelCreds{}, ""},
		{"spiffe bundle map", map[string]any{"spiffe_trust_bundle_map_file": "b.json", "refresh_interval": "1s"},
			config.TLSChannelCreds{SPIFFETrustBundleMapFile: "b.json", RefreshInterval: time.Second}, ""},
		{"cert without key", map[string]any{"ca_certificate_file": "ca.pem", "certificate_file": "c.pem"},
			config.TLSChannelCreds{}, "config: config.private_key_file: required with certificate_file"},
		{"key without cert", map[string]any{"ca_certificate_file": "ca.pem", "private_key_file": "k.pem"},
			config.TLSChannelCreds{}, "config: config.certificate_file: required with private_key_file"},
		{"unknown key", map[string]any{"ca_certificate_file": "ca.pem", "ca_file": "x"}, config.TLSChannelCreds{},
			"config: config.ca_file: unknown field (want ca_certificate_file, certificate_file, private_key_file, spiffe_trust_bundle_map_file or refresh_interval)"},
		{"not a string", map[string]any{"ca_certificate_file": 1}, config.TLSChannelCreds{},
			"config: config.ca_certificate_file: must be a string"},
		{"bad refresh interval", map[string]any{"ca_certificate_file": "ca.pem", "refresh_interval": "soon"},
			config.TLSChannelCreds{}, `config: config.refresh_interval: must be a positive duration like "10m"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.ChannelCreds{Type: "tls", Config: tt.cfg}.TLS()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("TLS() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("TLS(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("TLS() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateTLSOK(t *testing.T) {
	f := writeTLSFiles(t)
	tests := []struct {
		name string
		cfg  *config.Config
	}{
		{"server tls", withServer(func(c *config.Config) { c.TLS = &config.TLS{CertFile: f.cert, KeyFile: f.key} })},
		{"server mtls", withServer(func(c *config.Config) {
			c.TLS = &config.TLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca}
		})},
		{"upstream tls", withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "tls", Config: map[string]any{
				"ca_certificate_file": f.ca}}}
		})},
		{"upstream mtls in an authority", withServer(func(c *config.Config) {
			c.Upstream.Authorities = map[string]config.Authority{"a.example": {XDSServers: []config.Server{{
				ServerURI: "127.0.0.1:18010",
				ChannelCreds: []config.ChannelCreds{{Type: "tls", Config: map[string]any{
					"ca_certificate_file": f.ca, "certificate_file": f.cert, "private_key_file": f.key}}},
			}}}}
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

func TestValidateTLSErrors(t *testing.T) {
	f := writeTLSFiles(t)
	serverTLS := func(tls config.TLS) *config.Config {
		return withServer(func(c *config.Config) { c.TLS = &tls })
	}
	creds := func(m map[string]any) *config.Config {
		return withServer(func(c *config.Config) {
			c.Upstream.XDSServers[0].ChannelCreds = []config.ChannelCreds{{Type: "insecure"}, {Type: "tls", Config: m}}
		})
	}
	const cc = "upstream.xds_servers[0].channel_creds[1]"
	tests := []struct {
		name  string
		cfg   *config.Config
		field string
		msg   string
	}{
		{"empty section", serverTLS(config.TLS{}), "tls.cert_file", "required"},
		{"no key", serverTLS(config.TLS{CertFile: f.cert}), "tls.key_file", "required"},
		{"missing cert", serverTLS(config.TLS{CertFile: f.missing, KeyFile: f.key}), "tls.cert_file",
			"open " + f.missing + ": no such file or directory"},
		{"cert not PEM", serverTLS(config.TLS{CertFile: f.garbage, KeyFile: f.key}), "tls.cert_file",
			"no PEM certificate found"},
		{"missing key", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.missing}), "tls.key_file",
			"open " + f.missing + ": no such file or directory"},
		{"key not PEM", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.garbage}), "tls.key_file",
			"tls: failed to find any PEM data in key input"},
		{"certificate as key", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.keyC}), "tls.key_file",
			"tls: found a certificate rather than a key in the PEM for the private key"},
		{"key of another cert", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.otherKey}), "tls.key_file",
			"private key does not match the certificate of tls.cert_file"},
		{"client ca missing", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.missing}),
			"tls.client_ca_file", "open " + f.missing + ": no such file or directory"},
		{"client ca not PEM", serverTLS(config.TLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.garbage}),
			"tls.client_ca_file", "no PEM certificate found"},
		{"creds ca missing", creds(map[string]any{"ca_certificate_file": f.missing}),
			cc + ".config.ca_certificate_file", "open " + f.missing + ": no such file or directory"},
		{"creds ca is a key", creds(map[string]any{"ca_certificate_file": f.key}),
			cc + ".config.ca_certificate_file", "no PEM certificate found"},
		{"creds key mismatch", creds(map[string]any{"ca_certificate_file": f.ca, "certificate_file": f.cert,
			"private_key_file": f.otherKey}),
			cc + ".config.private_key_file", "private key does not match the certificate of " + cc + ".config.certificate_file"},
		{"creds cert without key", creds(map[string]any{"ca_certificate_file": f.ca, "certificate_file": f.cert}),
			cc + ".config.private_key_file", "required with certificate_file"},
		{"creds unknown key", creds(map[string]any{"ca_certificate_file": f.ca, "verify": false}),
			cc + ".config.verify", "unknown field (want ca_certificate_file, certificate_file, private_key_file, spiffe_trust_bundle_map_file or refresh_interval)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *config.FieldError", err)
			}
			if diff := cmp.Diff(&config.FieldError{Field: tt.field, Msg: tt.msg}, fe); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseThenValidateTLS is the docs/INTERFACE.md example (the interface contract)'s TLS parts, from YAML.
func TestParseThenValidateTLS(t *testing.T) {
	f := writeTLSFiles(t)
	yaml := `
upstream:
  xds_servers:
    - server_uri: "127.0.0.1:18010"
      channel_creds:
        - type: tls
          config: {ca_certificate_file: ` + f.ca + `, certificate_file: ` + f.cert + `, private_key_file: ` + f.key + `}
tls:
  cert_file: ` + f.cert + `
  key_file: ` + f.key + `
  client_ca_file: ` + f.ca + `
`
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	got, err := cfg.Upstream.XDSServers[0].ChannelCreds[0].TLS()
	if err != nil {
		t.Fatalf("TLS(): %v", err)
	}
	want := config.TLSChannelCreds{CACertificateFile: f.ca, CertificateFile: f.cert, PrivateKeyFile: f.key}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TLS() mismatch (-want +got):\n%s", diff)
	}

	cfg, err = config.Parse([]byte("upstream: {xds_servers: [{server_uri: 'a:1'}]}\ntls:\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := cfg.Validate(); err == nil || err.Error() != "config: tls.cert_file: required" {
		t.Errorf("Validate of an empty tls section = %v, want tls.cert_file required", err)
	}
}
