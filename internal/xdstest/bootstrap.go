package xdstest

import (
	"encoding/json"
	"fmt"
)

// Bootstrap describes a gRPC xDS bootstrap (gRFC A27, A47 for authorities)
// for a test client.
type Bootstrap struct {
	// ServerURI is the default xDS server's host:port (plaintext).
	ServerURI string
	// NodeID and NodeCluster identify the client.
	NodeID, NodeCluster string
	// NodeMetadata, when set, is sent as the node's metadata.
	NodeMetadata map[string]any
	// NodeZone is the node's locality zone. The locality is always present
	// (empty by default): grpc-js-xds rejects a bootstrap node without one.
	NodeZone string
	// Authorities maps an xdstp authority to its server's host:port; "" means
	// the authority uses the default server.
	Authorities map[string]string
	// ListenerTemplate is client_default_listener_resource_name_template
	// (e.g. "xdstp://auth.example/envoy.config.listener.v3.Listener/%s").
	ListenerTemplate string
}

type bootstrapServer struct {
	ServerURI      string           `json:"server_uri"`
	ChannelCreds   []map[string]any `json:"channel_creds"`
	ServerFeatures []string         `json:"server_features"`
}

type bootstrapAuthority struct {
	XDSServers []bootstrapServer `json:"xds_servers,omitempty"`
}

type bootstrapNode struct {
	ID       string         `json:"id"`
	Cluster  string         `json:"cluster,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	Locality bootstrapLoc   `json:"locality"`
}

type bootstrapLoc struct {
	Zone string `json:"zone,omitempty"`
}

type bootstrapJSON struct {
	XDSServers  []bootstrapServer             `json:"xds_servers"`
	Node        bootstrapNode                 `json:"node"`
	Authorities map[string]bootstrapAuthority `json:"authorities,omitempty"`
	Template    string                        `json:"client_default_listener_resource_name_template,omitempty"`
}

func plaintextServer(uri string) bootstrapServer {
	return bootstrapServer{
		ServerURI:      uri,
		ChannelCreds:   []map[string]any{{"type": "insecure"}},
		ServerFeatures: []string{"xds_v3"},
	}
}

// JSON renders the bootstrap, e.g.
//
//	{"xds_servers":[{"server_uri":"127.0.0.1:1234","channel_creds":[{"type":"insecure"}],
//	  "server_features":["xds_v3"]}],"node":{"id":"n1","cluster":"c1","locality":{}}}
func (b Bootstrap) JSON() []byte {
	out := bootstrapJSON{
		XDSServers: []bootstrapServer{plaintextServer(b.ServerURI)},
		Node: bootstrapNode{ID: b.NodeID, Cluster: b.NodeCluster, Metadata: b.NodeMetadata,
			Locality: bootstrapLoc{Zone: b.NodeZone}},
		Template: b.ListenerTemplate,
	}
	if len(b.Authorities) > 0 {
		out.Authorities = map[string]bootstrapAuthority{}
		for name, uri := range b.Authorities {
			var a bootstrapAuthority
			if uri != "" {
				a.XDSServers = []bootstrapServer{plaintextServer(uri)}
			}
			out.Authorities[name] = a
		}
	}
	j, err := json.Marshal(out)
	if err != nil {
		panic(fmt.Sprintf("xdstest: bootstrap: %v", err))
	}
	return j
}
