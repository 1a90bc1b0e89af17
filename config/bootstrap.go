package config

import (
	"encoding/json"
	"fmt"
	"os"
)

// bootstrapFile is the part of a gRPC xDS bootstrap file (gRFC A27, A47) the
// relay reads. Other keys (node, certificate_providers, the listener
// resource name templates) are ignored, as gRPC ignores keys it does not know.
type bootstrapFile struct {
	XDSServers  []bootstrapServer `json:"xds_servers"`
	Authorities map[string]struct {
		XDSServers []bootstrapServer `json:"xds_servers"`
	} `json:"authorities"`
}

type bootstrapServer struct {
	ServerURI    string `json:"server_uri"`
	ChannelCreds []struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config"`
	} `json:"channel_creds"`
	CallCreds []struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config"`
	} `json:"call_creds"`
	ServerFeatures []string `json:"server_features"`
}

// LoadBootstrap reads the gRPC xDS bootstrap file at path (the JSON file
// GRPC_XDS_BOOTSTRAP names) and sets u's servers and authorities from its
// xds_servers and authorities, replacing what u had. The servers are checked
// by Validate, which names them by their place in the file. An error names
// upstream.bootstrap_file.
func (u *Upstream) LoadBootstrap(path string) error {
	fail := func(format string, a ...any) error {
		return &FieldError{Field: "upstream.bootstrap_file", Msg: fmt.Sprintf("%s: ", path) + fmt.Sprintf(format, a...)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return &FieldError{Field: "upstream.bootstrap_file", Msg: err.Error()}
	}
	var b bootstrapFile
	if err := json.Unmarshal(data, &b); err != nil {
		return fail("not a gRPC xDS bootstrap (JSON): %v", err)
	}
	u.BootstrapFile = path
	u.XDSServers = convertServers(b.XDSServers)
	u.Authorities = nil
	if len(b.Authorities) > 0 {
		u.Authorities = make(map[string]Authority, len(b.Authorities))
		for name, a := range b.Authorities {
			u.Authorities[name] = Authority{XDSServers: convertServers(a.XDSServers)}
		}
	}
	return nil
}

func convertServers(in []bootstrapServer) []Server {
	out := make([]Server, 0, len(in))
	for _, s := range in {
		srv := Server{ServerURI: s.ServerURI, ServerFeatures: s.ServerFeatures}
		for _, cc := range s.ChannelCreds {
			srv.ChannelCreds = append(srv.ChannelCreds, ChannelCreds{Type: cc.Type, Config: cc.Config})
		}
		for _, cc := range s.CallCreds {
			srv.CallCreds = append(srv.CallCreds, CallCreds{Type: cc.Type, Config: cc.Config})
		}
		out = append(out, srv)
	}
	return out
}
