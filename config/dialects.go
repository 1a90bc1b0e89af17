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
	// one is held before it is answered 304 Not Modified. Default 30s; must
	// be positive.
	PollTimeout time.Duration `yaml:"poll_timeout"`
}

// Gateway configures the gateway.control.v1 dialect, served on the
// downstream listener and relayed to the default upstream servers. It is on
// without this section, with the defaults below; a key the section leaves
// out takes its default, one it sets keeps its value, empty included.
type Gateway struct {
	// GroupBy lists the request fields that split data planes into
	// snapshot groups, each with its own upstream stream: node_id, cluster,
	// supported_features. Default [cluster]: every data plane of a cluster
	// shares one upstream subscription (per set of subscribed types). An
	// empty list ([]) puts every data plane in one group (per set of
	// subscribed types), presenting the relay's own node upstream.
	GroupBy []string `yaml:"group_by"`
	// ReportRetries bounds the attempts to forward one status report
	// upstream. Default 3; must be positive.
	ReportRetries int `yaml:"report_retries"`
}

// Defaults of the rest and gateway sections, taken by the keys a present
// section leaves out.
const (
	DefaultPollTimeout   = 30 * time.Second
	DefaultReportRetries = 3
)

// DefaultGatewayGroupBy is gateway.group_by when the key is absent.
func DefaultGatewayGroupBy() []string { return []string{"cluster"} }

func defaultREST() *REST { return &REST{PollTimeout: DefaultPollTimeout} }

func defaultGateway() *Gateway {
	return &Gateway{GroupBy: DefaultGatewayGroupBy(), ReportRetries: DefaultReportRetries}
}

// dialects checks the rest and gateway sections.
func (v *validation) dialects(c *Config) {
	if r := c.REST; r != nil {
		if r.Listen == "" {
			v.add("rest.listen", "must be set (host:port)")
		} else {
			v.hostPort("rest.listen", r.Listen, false)
		}
		if r.PollTimeout <= 0 {
			v.add("rest.poll_timeout", "must be positive, got %v (how long a poll with nothing new is held)", r.PollTimeout)
		}
	}
	if g := c.Gateway; g != nil {
		for i, f := range g.GroupBy {
			switch f {
			case "node_id", "cluster", "supported_features":
			default:
				v.add(fmt.Sprintf("gateway.group_by[%d]", i),
					"unknown field %q (want node_id, cluster or supported_features)", f)
			}
		}
		if g.ReportRetries <= 0 {
			v.add("gateway.report_retries", "must be positive, got %d (attempts to forward one status report)", g.ReportRetries)
		}
	}
}
