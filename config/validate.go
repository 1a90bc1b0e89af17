package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Validate checks c and returns every problem found, each a *FieldError
// naming the field, joined with errors.Join (errors.As finds the first), or
// nil. Checks run in the order of the file's sections, so the errors are the
// same, in the same order, on every run.
func (c *Config) Validate() error {
	if c == nil {
		return &FieldError{Field: "(top level)", Msg: "no configuration"}
	}
	var v validation
	v.rollout(c.Rollout)
	v.keying(c.Keying)
	if p := c.Cache.PersistPath; p != "" {
		if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
			v.add("cache.persist_path", "directory of %q does not exist", p)
		}
	}

	v.hostPort("listen", c.Listen, false)
	if c.Admin != "" {
		v.hostPort("admin", c.Admin, false)
	}
	if c.ProbeListen != "" {
		v.hostPort("probe_listen", c.ProbeListen, false)
	}
	if p := c.AdminTokenFile; p != "" {
		if b, err := os.ReadFile(p); err != nil || len(bytes.TrimSpace(b)) == 0 {
			v.add("admin_token_file", "%q must be a readable file holding a token", p)
		}
	}
	if c.Node.ID == "" {
		v.add("node.id", "must not be empty")
	}
	v.nonNegative("upstream.linger", c.Upstream.Linger < 0, "")
	if c.Upstream.UnavailableAfter <= 0 {
		v.add("upstream.unavailable_after", "must be positive, got %v", c.Upstream.UnavailableAfter)
	}
	if c.Upstream.DoesNotExistAfter <= 0 {
		v.add("upstream.does_not_exist_after", "must be positive, got %v", c.Upstream.DoesNotExistAfter)
	}
	if c.Upstream.MoveWait <= 0 {
		v.add("upstream.move_wait", "must be positive, got %v", c.Upstream.MoveWait)
	}
	v.nonNegative("cache.max_unreferenced", c.Cache.MaxUnreferenced < 0, " (0 keeps none)")
	v.nonNegative("cache.persist_interval", c.Cache.PersistInterval < 0, " (0 is the default, 1s)")
	if c.Cache.MaxUnreferenced == 0 && c.Cache.PersistPath != "" {
		v.add("cache.max_unreferenced", "must be positive with cache.persist_path: "+
			"nothing is watched when the warm-restart file is loaded, and 0 keeps none of it")
	}
	v.positive("limits.max_names_per_request", c.Limits.MaxNamesPerRequest)
	if n := c.Limits.MaxRecvMessageBytes; n < MinRecvMessageBytes {
		v.add("limits.max_recv_message_bytes", "must be at least %d (a request carries the client's node), got %d",
			MinRecvMessageBytes, n)
	}
	v.positive("limits.max_subscriptions_per_stream", c.Limits.MaxSubscriptionsPerStream)
	v.positive("limits.max_streams_per_connection", c.Limits.MaxStreamsPerConnection)
	v.nonNegative("limits.new_streams_per_second", c.Limits.NewStreamsPerSecond < 0, " (0 disables it)")
	v.nonNegative("limits.max_connection_age", c.Limits.MaxConnectionAge < 0, " (0 disables it)")
	v.nonNegative("limits.keepalive_min_time", c.Limits.KeepaliveMinTime < 0, "")
	v.nonNegative("shutdown.drain_window", c.Shutdown.DrainWindow < 0, " (0 ends every stream at once)")

	// The default servers serve legacy names and authorities without servers
	// of their own, so at least one is required.
	up := "upstream."
	if f := c.Upstream.BootstrapFile; f != "" {
		up = fmt.Sprintf("upstream.bootstrap_file(%s).", f)
	}
	if len(c.Upstream.XDSServers) == 0 {
		v.add(up+"xds_servers", "at least one server is required")
	}
	v.servers(up+"xds_servers", c.Upstream.XDSServers)
	for _, name := range slices.Sorted(maps.Keys(c.Upstream.Authorities)) {
		path := fmt.Sprintf("%sauthorities[%q]", up, name)
		switch {
		case name == "":
			v.add(path, "authority name must not be empty")
		case strings.ContainsAny(name, "/?#"):
			v.add(path, "authority name must not contain '/', '?' or '#'")
		}
		v.servers(path+".xds_servers", c.Upstream.Authorities[name].XDSServers)
	}
	v.dialects(c)
	if c.TLS != nil {
		v.tls(c.TLS)
	}
	return errors.Join(v.errs...)
}

// validation collects the problems of a Config.
type validation struct{ errs []error }

// rollout checks the rollout section, if any.
func (v *validation) rollout(ro *Rollout) {
	if ro == nil {
		return
	}
	if ro.CanaryFraction < 0 || ro.CanaryFraction > 1 {
		v.add("rollout.canary_fraction", "must be in [0, 1] (0: one canary per change), got %v", ro.CanaryFraction)
	}
	if ro.Hold <= 0 {
		v.add("rollout.hold", "must be positive, got %v (to turn rollouts off, remove the rollout section)", ro.Hold)
	}
	if ro.MaxNACKRatio < 0 || ro.MaxNACKRatio > 1 {
		v.add("rollout.max_nack_ratio", "must be in [0, 1], got %v", ro.MaxNACKRatio)
	}
}

// keying checks the keying section, if any.
func (v *validation) keying(k *Keying) {
	if k == nil {
		return
	}
	for i, f := range k.GroupBy {
		v.nodeField(fmt.Sprintf("keying.group_by[%d]", i), f)
	}
	for _, p := range slices.Sorted(maps.Keys(k.DynamicParametersFromNode)) {
		if p == "" {
			v.add("keying.dynamic_parameters_from_node", "empty parameter name")
			continue
		}
		v.nodeField("keying.dynamic_parameters_from_node."+p, k.DynamicParametersFromNode[p])
	}
}

func (v *validation) add(field, format string, a ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)})
}

// addErr records err, a *FieldError or an error about field.
func (v *validation) addErr(field string, err error) {
	var fe *FieldError
	if errors.As(err, &fe) {
		v.errs = append(v.errs, fe)
		return
	}
	v.add(field, "%v", err)
}

func (v *validation) positive(field string, n int) {
	if n <= 0 {
		v.add(field, "must be positive")
	}
}

func (v *validation) nonNegative(field string, negative bool, note string) {
	if negative {
		v.add(field, "must not be negative%s", note)
	}
}

// servers validates one server list; path names the list.
func (v *validation) servers(path string, servers []Server) {
	for i, s := range servers {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.serverURI(p+".server_uri", s.ServerURI)
		switch s.Protocol {
		case "", "auto", "sotw", "delta":
		default:
			v.add(p+".protocol", "unknown protocol %q (want auto, sotw or delta)", s.Protocol)
		}
		untyped := false
		for j, cc := range s.ChannelCreds {
			e := fmt.Sprintf("%s.channel_creds[%d]", p, j)
			switch cc.Type {
			case CredsTLS:
				if err := checkTLSCreds(e, cc); err != nil {
					v.addErr(e, err)
				}
			case "":
				untyped = true
				v.add(e+".type", "must be set (insecure, tls or google_default)")
			}
		}
		sel, ok := s.Selected()
		if !ok && !untyped {
			v.add(p+".channel_creds", "no supported type (want insecure, tls or google_default; others are skipped)")
		}
		calls := false
		for j, cc := range s.CallCreds {
			e := fmt.Sprintf("%s.call_creds[%d]", p, j)
			switch cc.Type {
			case CallCredsJWTTokenFile:
				calls = true
				if _, err := cc.JWTTokenFile(); err != nil {
					v.addErr(e, prefixed(e, err))
				}
			case "":
				v.add(e+".type", "must be set (jwt_token_file)")
			}
		}
		if calls && ok && sel.Type == CredsInsecure {
			v.add(p+".call_creds", "need tls channel_creds: call credentials are sent over a secure channel only")
		}
	}
}

// serverURI checks an upstream server's gRPC target: host:port, or a target
// URI of the dns, passthrough or unix schemes.
func (v *validation) serverURI(field, s string) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(rest, "//") && scheme != "unix" && scheme != "unix-abstract" {
		v.hostPort(field, s, true)
		return
	}
	switch scheme {
	case "dns", "passthrough":
		u, err := url.Parse(s)
		if err != nil {
			v.add(field, "must be host:port or a gRPC target, got %q", s)
			return
		}
		v.hostPort(field, strings.TrimPrefix(u.Path, "/"), true)
	case "unix", "unix-abstract":
		if strings.Trim(rest, "/") == "" {
			v.add(field, "%s: target needs a path, got %q", scheme, s)
		}
	default:
		v.add(field, "unsupported scheme %q (want host:port, dns:///host:port, passthrough:///host:port or unix:PATH)", scheme)
	}
}

// hostPort checks that s is host:port with a numeric port. For an address to
// dial (needHost), the host is required and the port is not 0.
func (v *validation) hostPort(field, s string, needHost bool) {
	bad := func(why string) { v.add(field, "must be host:port%s, got %q", why, s) }
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		bad("")
		return
	}
	if strings.ContainsAny(host, "/ \t") {
		bad(" without a scheme or spaces")
		return
	}
	if needHost && host == "" {
		bad(" with a host")
		return
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (needHost && n == 0) {
		bad(" with a port number")
	}
}

// nodeField checks a node field name of keying.
func (v *validation) nodeField(field, f string) {
	switch {
	case f == "id", f == "cluster", f == "locality.region", f == "locality.zone", f == "locality.sub_zone":
	case strings.HasPrefix(f, "metadata.") && len(f) > len("metadata."):
	default:
		v.add(field, "unknown node field %q (want id, cluster, locality.region, locality.zone, locality.sub_zone or metadata.KEY)", f)
	}
}

// prefixed returns err with its field (relative to an entry) prefixed by the
// entry's path.
func prefixed(path string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: path + "." + fe.Field, Msg: fe.Msg}
	}
	return err
}
