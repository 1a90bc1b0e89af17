package config

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Validate checks c and returns the first problem found as a *FieldError
// naming the field, or nil. Checks run in the order of the file's sections, so
// the error is the same on every run.
func (c *Config) Validate() error {
	if c == nil {
		return &FieldError{Field: "(top level)", Msg: "no configuration"}
	}
	if ro := c.Rollout; ro != nil {
		switch {
		case ro.CanaryFraction <= 0 || ro.CanaryFraction > 1:
			return &FieldError{Field: "rollout.canary_fraction", Msg: fmt.Sprintf("must be in (0, 1], got %v", ro.CanaryFraction)}
		case ro.Hold <= 0:
			return &FieldError{Field: "rollout.hold", Msg: "must be positive"}
		case ro.MaxNACKRatio < 0 || ro.MaxNACKRatio > 1:
			return &FieldError{Field: "rollout.max_nack_ratio", Msg: fmt.Sprintf("must be in [0, 1], got %v", ro.MaxNACKRatio)}
		}
	}
	if k := c.Keying; k != nil {
		for i, f := range k.GroupBy {
			if err := checkNodeField(fmt.Sprintf("keying.group_by[%d]", i), f); err != nil {
				return err
			}
		}
		for _, p := range slices.Sorted(maps.Keys(k.DynamicParametersFromNode)) {
			if p == "" {
				return &FieldError{Field: "keying.dynamic_parameters_from_node", Msg: "empty parameter name"}
			}
			if err := checkNodeField("keying.dynamic_parameters_from_node."+p, k.DynamicParametersFromNode[p]); err != nil {
				return err
			}
		}
	}
	if p := c.Cache.PersistPath; p != "" {
		if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
			return &FieldError{Field: "cache.persist_path", Msg: fmt.Sprintf("directory of %q does not exist", p)}
		}
	}

	if err := checkHostPort("listen", c.Listen, false); err != nil {
		return err
	}
	if c.Admin != "" {
		if err := checkHostPort("admin", c.Admin, false); err != nil {
			return err
		}
	}
	switch {
	case c.Node.ID == "":
		return &FieldError{Field: "node.id", Msg: "must not be empty"}
	case c.Upstream.Linger < 0:
		return &FieldError{Field: "upstream.linger", Msg: "must not be negative"}
	case c.Upstream.UnavailableAfter < 0:
		return &FieldError{Field: "upstream.unavailable_after", Msg: "must not be negative"}
	case c.Cache.MaxUnreferenced < 0:
		return &FieldError{Field: "cache.max_unreferenced", Msg: "must not be negative"}
	case c.Limits.MaxNamesPerRequest <= 0:
		return &FieldError{Field: "limits.max_names_per_request", Msg: "must be positive"}
	case c.Limits.MaxRecvMessageBytes <= 0:
		return &FieldError{Field: "limits.max_recv_message_bytes", Msg: "must be positive"}
	case c.Limits.MaxSubscriptionsPerStream <= 0:
		return &FieldError{Field: "limits.max_subscriptions_per_stream", Msg: "must be positive"}
	case c.Limits.MaxStreamsPerConnection <= 0:
		return &FieldError{Field: "limits.max_streams_per_connection", Msg: "must be positive"}
	case c.Limits.NewStreamsPerSecond < 0:
		return &FieldError{Field: "limits.new_streams_per_second", Msg: "must not be negative (0 disables it)"}
	case c.Limits.MaxConnectionAge < 0:
		return &FieldError{Field: "limits.max_connection_age", Msg: "must not be negative (0 disables it)"}
	case c.Limits.KeepaliveMinTime < 0:
		return &FieldError{Field: "limits.keepalive_min_time", Msg: "must not be negative"}
	}

	// The default servers serve legacy names and authorities without servers
	// of their own, so at least one is required.
	if len(c.Upstream.XDSServers) == 0 {
		return &FieldError{Field: "upstream.xds_servers", Msg: "at least one server is required"}
	}
	if err := checkServers("upstream.xds_servers", c.Upstream.XDSServers); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Upstream.Authorities)) {
		path := fmt.Sprintf("upstream.authorities[%q]", name)
		switch {
		case name == "":
			return &FieldError{Field: path, Msg: "authority name must not be empty"}
		case strings.ContainsAny(name, "/?#"):
			return &FieldError{Field: path, Msg: "authority name must not contain '/', '?' or '#'"}
		}
		if err := checkServers(path+".xds_servers", c.Upstream.Authorities[name].XDSServers); err != nil {
			return err
		}
	}
	if err := c.validateDialects(); err != nil {
		return err
	}
	if c.TLS != nil {
		return checkTLS(c.TLS)
	}
	return nil
}

// checkServers validates one server list; path names the list.
func checkServers(path string, servers []Server) error {
	for i, s := range servers {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := checkHostPort(p+".server_uri", s.ServerURI, true); err != nil {
			return err
		}
		switch s.Protocol {
		case "", "auto", "sotw", "delta":
		default:
			return &FieldError{Field: p + ".protocol", Msg: fmt.Sprintf("unknown protocol %q (want auto, sotw or delta)", s.Protocol)}
		}
		for j, cc := range s.ChannelCreds {
			e := fmt.Sprintf("%s.channel_creds[%d]", p, j)
			switch cc.Type {
			case "insecure":
			case "tls":
				if err := checkTLSCreds(e, cc); err != nil {
					return err
				}
			case "":
				return &FieldError{Field: e + ".type", Msg: "must be set (insecure or tls)"}
			default:
				return &FieldError{Field: e + ".type", Msg: fmt.Sprintf("unknown type %q (want insecure or tls)", cc.Type)}
			}
		}
	}
	return nil
}

// checkHostPort checks that s is host:port with a numeric port. For an
// address to dial (needHost), the host is required and the port is not 0.
func checkHostPort(field, s string, needHost bool) error {
	bad := func(why string) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf("must be host:port%s, got %q", why, s)}
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return bad("")
	}
	if strings.ContainsAny(host, "/ \t") {
		return bad(" without a scheme or spaces")
	}
	if needHost && host == "" {
		return bad(" with a host")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (needHost && n == 0) {
		return bad(" with a port number")
	}
	return nil
}

// checkNodeField checks a node field name of keying.
func checkNodeField(field, f string) error {
	switch {
	case f == "id", f == "cluster", f == "locality.region", f == "locality.zone", f == "locality.sub_zone":
	case strings.HasPrefix(f, "metadata.") && len(f) > len("metadata."):
	default:
		return &FieldError{Field: field,
			Msg: fmt.Sprintf("unknown node field %q (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY)", f)}
	}
	return nil
}
