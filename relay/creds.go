package relay

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/xds/bootstrap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// serverCreds are the credentials of one upstream server.
type serverCreds struct {
	transport credentials.TransportCredentials // nil: plaintext
	calls     []credentials.PerRPCCredentials
}

// credsSet holds the credentials the config needs and what closes them.
type credsSet struct {
	// downstream is the listener's (nil: plaintext).
	downstream credentials.TransportCredentials
	// upstream are, by authority ("" for the default servers), the
	// credentials of each server in the order newClient gets them.
	upstream map[string][]serverCreds
	// closers stop the certificate providers' goroutines.
	closers []func()
}

func (cs *credsSet) close() {
	for _, c := range cs.closers {
		c()
	}
}

// buildCreds reads the TLS files of the config before anything starts, so
// that a bad one fails New.
func buildCreds(cfg *config.Config) (*credsSet, error) {
	cs := &credsSet{upstream: map[string][]serverCreds{}}
	if t := cfg.TLS; t != nil {
		c, stop, err := tlsconfig.ServerCredentials(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile,
			CAFile: t.ClientCAFile}, t.RefreshInterval)
		if err != nil {
			return nil, fmt.Errorf("relay: tls: %w", err)
		}
		cs.downstream = c
		cs.closers = append(cs.closers, stop)
	}
	add := func(auth string, servers []config.Server) error {
		if len(servers) == 0 {
			servers = cfg.Upstream.XDSServers
		}
		for _, s := range servers {
			c, err := cs.server(s)
			if err != nil {
				cs.close()
				return fmt.Errorf("relay: upstream %s: %w", s.ServerURI, err)
			}
			cs.upstream[auth] = append(cs.upstream[auth], c)
		}
		return nil
	}
	if err := add("", cfg.Upstream.XDSServers); err != nil {
		return nil, err
	}
	for auth, a := range cfg.Upstream.Authorities {
		if err := add(auth, a.XDSServers); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// server builds the credentials of s with gRPC's own xDS bootstrap
// credential builders (google.golang.org/grpc/xds/bootstrap): insecure, tls
// (gRFC A65, over the pemfile certificate provider), google_default, and the
// call credentials jwt_token_file (gRFC A97). The relay reads channel_creds
// and call_creds as a gRPC xDS client reads its bootstrap: the first
// supported channel creds, every supported call creds.
func (cs *credsSet) server(s config.Server) (serverCreds, error) {
	var out serverCreds
	sel, ok := s.Selected()
	if !ok {
		return out, fmt.Errorf("no supported channel_creds") // Validate says so first
	}
	b := bootstrap.GetChannelCredentials(sel.Type)
	if b == nil {
		return out, fmt.Errorf("channel_creds type %q is not registered with grpc", sel.Type)
	}
	raw, err := channelConfig(sel)
	if err != nil {
		return out, err
	}
	bundle, stop, err := b.Build(raw)
	if err != nil {
		return out, fmt.Errorf("channel_creds %s: %w", sel.Type, err)
	}
	cs.closers = append(cs.closers, stop)
	if sel.Type != config.CredsInsecure {
		out.transport = bundle.TransportCredentials()
	}
	if pc := bundle.PerRPCCredentials(); pc != nil {
		out.calls = append(out.calls, pc) // google_default's OAuth token
	}
	for _, cc := range s.CallCreds {
		if cc.Type != config.CallCredsJWTTokenFile {
			continue // gRFC A97: unsupported call creds types are skipped
		}
		file, err := cc.JWTTokenFile()
		if err != nil {
			return out, fmt.Errorf("call_creds: %w", err)
		}
		raw, _ := json.Marshal(map[string]string{"jwt_token_file": file})
		pc, stop, err := bootstrap.GetCallCredentials(cc.Type).Build(raw)
		if err != nil {
			return out, fmt.Errorf("call_creds %s: %w", cc.Type, err)
		}
		cs.closers = append(cs.closers, stop)
		out.calls = append(out.calls, pc)
	}
	return out, nil
}

// channelConfig is the JSON config of the selected channel creds as gRPC's
// builder reads it: for tls, the keys of gRFC A65 with refresh_interval in
// the protobuf JSON form of a duration ("600s") that pemfile parses.
func channelConfig(cc config.ChannelCreds) (json.RawMessage, error) {
	if cc.Type != config.CredsTLS {
		return nil, nil
	}
	t, err := cc.TLS()
	if err != nil {
		return nil, fmt.Errorf("channel_creds tls: %w", err)
	}
	m := map[string]string{}
	for k, v := range map[string]string{"ca_certificate_file": t.CACertificateFile, "certificate_file": t.CertificateFile,
		"private_key_file": t.PrivateKeyFile, "spiffe_trust_bundle_map_file": t.SPIFFETrustBundleMapFile} {
		if v != "" {
			m[k] = v
		}
	}
	if t.RefreshInterval > 0 {
		m["refresh_interval"] = fmt.Sprintf("%gs", t.RefreshInterval.Seconds())
	}
	return json.Marshal(m)
}
