package config

import (
	"fmt"
	"time"
)

// The config sections of the other ways into the relay (CONTRACT.md, "More
// ways in"): REST-JSON polling and the gateway.control.v1 dialect. CSDS needs
// no configuration: it is served on the downstream listener.

// REST is the REST-JSON polling endpoint (xDS "REST-JSON polling
// subscriptions"): POST /v3/discovery:TYPE with a DiscoveryRequest in proto3
// JSON.
type REST struct {
	// Listen is the HTTP address it serves on. Required. It serves TLS (and
	// requires client certificates) exactly as the downstream listener does
	// when the tls section is set.
	Listen string `yaml:"listen"`
	// PollTimeout is how long a request whose version_info is the current
	// one is held before it is answered 304 Not Modified. Default 30s.
	PollTimeout time.Duration `yaml:"poll_timeout,omitempty"`
}

// Gateway configures the gateway.control.v1 dialect, served on the
// downstream listener and relayed to the default upstream servers. It is on
// without this section, with the defaults below.
type Gateway struct {
	// GroupBy lists the request fields that split data planes into
	// snapshot groups, each with its own upstream stream: node_id, cluster,
	// supported_features. Default [cluster]: every data plane of a cluster
	// shares one upstream subscription (per set of subscribed types).
	GroupBy []string `yaml:"group_by,omitempty"`
	// ReportRetries bounds the attempts to forward one status report
	// upstream. Default 3.
	ReportRetries int `yaml:"report_retries,omitempty"`
}

// validateDialects checks the rest and gateway sections.
func (c *Config) validateDialects() error {
	if r := c.REST; r != nil {
		if r.Listen == "" {
			return &FieldError{Field: "rest.listen", Msg: "must be set (host:port)"}
		}
		if err := checkHostPort("rest.listen", r.Listen, false); err != nil {
			return err
		}
		if r.PollTimeout < 0 {
			return &FieldError{Field: "rest.poll_timeout", Msg: "must not be negative"}
		}
	}
	if g := c.Gateway; g != nil {
		for i, f := range g.GroupBy {
			switch f {
			case "node_id", "cluster", "supported_features":
			default:
				return &FieldError{Field: fmt.Sprintf("gateway.group_by[%d]", i),
					Msg: fmt.Sprintf("unknown field %q (want node_id, cluster or supported_features)", f)}
			}
		}
		if g.ReportRetries < 0 {
			return &FieldError{Field: "gateway.report_retries", Msg: "must not be negative"}
		}
	}
	return nil
}
