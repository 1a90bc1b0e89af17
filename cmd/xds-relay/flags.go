package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
)

// options are the command line of xds-relay.
type options struct {
	validate bool // the "validate" subcommand

	configPath string
	listen     string
	admin      string
	probe      string
	adminToken string
	upstream   string
	bootstrap  string
	restListen string
	nodeID     string
	logLevel   string
	logFormat  string
	version    bool
	channelz   bool

	// set holds the names of the flags given on the command line: only those
	// override the config file.
	set map[string]bool
}

// parseArgs parses args (without the program name). The "validate"
// subcommand may come before, after or between the flags. On --help it
// writes the usage to out and returns flag.ErrHelp.
func parseArgs(args []string, out io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	def := config.Default()
	fs := flag.NewFlagSet("xds-relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage is written below
	fs.StringVar(&o.configPath, "config", "", "YAML config `FILE` (sections below); flags override it")
	fs.StringVar(&o.listen, "listen", def.Listen, "downstream xDS gRPC `ADDR` (host:port)")
	fs.StringVar(&o.admin, "admin", def.Admin, "admin HTTP `ADDR` (host:port); \"\" disables it")
	fs.StringVar(&o.probe, "probe-listen", "",
		"probe HTTP `ADDR` (host:port): GET /healthz, /readyz and /metrics only, for the kubelet and\n"+
			"Prometheus on the pod IP while the admin API stays on loopback; sets probe_listen")
	fs.StringVar(&o.adminToken, "admin-token-file", "",
		"a `FILE` holding a bearer token that the admin API's /drain and /debug/* (log level, pprof)\n"+
			"require (Authorization: Bearer TOKEN; re-read when it changes); sets admin_token_file")
	fs.StringVar(&o.upstream, "upstream", "",
		"one default plaintext upstream xDS server `ADDR` (host:port); replaces upstream.xds_servers")
	fs.StringVar(&o.bootstrap, "upstream-bootstrap", "",
		"a gRPC xDS bootstrap JSON `FILE` (as GRPC_XDS_BOOTSTRAP names) whose xds_servers and authorities\n"+
			"replace the config's upstream servers (upstream.bootstrap_file)")
	fs.StringVar(&o.restListen, "rest-listen", "", "REST-JSON polling HTTP `ADDR` (host:port); sets rest.listen")
	fs.StringVar(&o.nodeID, "node-id", "",
		"the node `ID` the relay presents upstream; sets node.id (e.g. the pod name, so that a\n"+
			"control plane tells replicas apart)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "log `FORMAT`: json or console")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVar(&o.channelz, "channelz", false,
		"serve gRPC channelz on --listen (grpcdebug); it shows client addresses to whoever reaches the\n"+
			"xDS port; sets channelz")

	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				writeUsage(out, fs)
				return nil, flag.ErrHelp
			}
			return nil, err
		}
		// The flag package stops at the first argument that is not a flag.
		if fs.NArg() > 0 && fs.Arg(0) == "validate" && !o.validate {
			o.validate = true
			args = fs.Args()[1:]
			continue
		}
		break
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.upstream != "" && o.bootstrap != "" {
		return nil, errors.New("--upstream and --upstream-bootstrap both replace the upstream servers: give one")
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("invalid value %q for flag --log-level: want debug, info, warn or error", o.logLevel)
	}
	if o.logFormat != "json" && o.logFormat != "console" {
		return nil, fmt.Errorf("invalid value %q for flag --log-format: want json or console", o.logFormat)
	}
	return o, nil
}

// config loads the config file (or the defaults) and applies the flags that
// were set. It does not validate.
func (o *options) config() (*config.Config, error) {
	cfg, _, err := o.load()
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// validConfig is config, validated: its error names every problem at once,
// the file's unknown keys and bad values beside what Validate finds in the
// rest, each with its line in the file when it has one.
func (o *options) validConfig() (*config.Config, error) {
	cfg, locs, err := o.load()
	if cfg == nil {
		return nil, err
	}
	if err := locs.Report(err, cfg.Validate()); err != nil {
		return nil, err
	}
	return cfg, nil
}

// load is config that keeps going after the file's unknown keys and bad
// values: it returns their error with the Config of the rest of the file and
// the flags, and where the file's fields are (nil without a file). A flag's
// field is forgotten there, since its value is not the file's.
func (o *options) load() (*config.Config, *config.Locations, error) {
	cfg := config.Default()
	var locs *config.Locations
	var fileErr error
	if o.configPath != "" {
		cfg, locs, fileErr = config.LoadAll(o.configPath)
		if cfg == nil {
			return nil, locs, fileErr
		}
	}
	if o.set["listen"] {
		cfg.Listen = o.listen
		locs.Forget("listen")
	}
	if o.set["admin"] {
		cfg.Admin = o.admin
		locs.Forget("admin")
	}
	if o.set["admin-token-file"] {
		cfg.AdminTokenFile = o.adminToken
		locs.Forget("admin_token_file")
	}
	if o.set["probe-listen"] {
		cfg.ProbeListen = o.probe
		locs.Forget("probe_listen")
	}
	if o.set["channelz"] {
		cfg.Channelz = o.channelz
		locs.Forget("channelz")
	}
	if o.set["node-id"] {
		cfg.Node.ID = o.nodeID
		locs.Forget("node.id")
	}
	if o.set["upstream"] || o.set["upstream-bootstrap"] {
		locs.Forget("upstream.xds_servers")
		locs.Forget("upstream.authorities")
		locs.Forget("upstream.bootstrap_file")
	}
	if o.set["upstream"] {
		cfg.Upstream.BootstrapFile, cfg.Upstream.Authorities = "", nil
		cfg.Upstream.XDSServers = []config.Server{{
			ServerURI:    o.upstream,
			ChannelCreds: []config.ChannelCreds{{Type: "insecure"}},
		}}
	}
	if o.set["upstream-bootstrap"] {
		if err := cfg.Upstream.LoadBootstrap(o.bootstrap); err != nil {
			return nil, locs, errors.Join(fileErr, err)
		}
	}
	if o.set["rest-listen"] {
		if cfg.REST == nil {
			cfg.REST = &config.REST{PollTimeout: config.DefaultPollTimeout}
		}
		cfg.REST.Listen = o.restListen
		locs.Forget("rest.listen")
	}
	return cfg, locs, fileErr
}

const usageHead = `xds-relay is a caching xDS relay: it serves xDS (ADS and the per-type
services, SotW and Delta) to many clients from one upstream subscription per
resource. The same listener serves CSDS (the status of every client) and
gateway.control.v1 (snapshots, Delta resources, status reports); REST-JSON
polling has a listener of its own (--rest-listen).

Usage:
  xds-relay [flags]                     run the relay until SIGTERM or SIGINT
  xds-relay validate [flags]            check the config (file and flags) and exit:
  xds-relay [flags] validate            "config OK" and 0, or every bad field and 1

Flags (given flags override the config file):
`

const usageConfig = `
Config file (YAML; unknown keys are errors; durations like "5s"; a key that is
present keeps its value, 0 included):
  listen: ":18001"              downstream xDS gRPC address
  admin: "127.0.0.1:9902"       admin HTTP address ("" disables it; endpoints below)
  admin_token_file: ""          a file with a bearer token that /drain and /debug/* require
                                ("" (the default): no token); re-read when it changes
  probe_listen: ""              probe HTTP address: GET /healthz, /readyz, /metrics only (every
                                other path 404); "" (the default) turns it off
  channelz: false               serve gRPC channelz on listen (grpcdebug); shows client
                                addresses to whoever reaches the xDS port
  node:                         the identity the relay presents upstream
    id: "xds-relay"             --node-id overrides it: give each replica its own
    cluster: "xds-relay"
    metadata: {}                string values
  upstream:                     the shape of a gRPC xDS bootstrap (gRFC A27/A47)
    bootstrap_file: ""          or: a gRPC xDS bootstrap JSON file whose xds_servers and
                                authorities are used (its node is ignored)
    xds_servers:                default servers, tried in order; at least one
      - server_uri: "127.0.0.1:18000"     host:port, or dns:///host:port, unix:PATH
        channel_creds: [{type: insecure}] as in the gRPC bootstrap: unknown types are
                                          skipped, the first of insecure, tls,
                                          google_default is used. TLS (gRFC A65):
                                          {type: tls, config: {ca_certificate_file: ca.pem,
                                          certificate_file: relay.pem, private_key_file:
                                          relay-key.pem, refresh_interval: 10m}}; no CA file:
                                          the system roots; the cert and key give mTLS
        call_creds:                       per-call credentials (gRFC A97), over tls only:
          - {type: jwt_token_file, config: {jwt_token_file: /var/run/token.jwt}}
                                          sent as "authorization: Bearer TOKEN"
        protocol: auto                    auto (Delta; SotW if the server has none), sotw, delta
    authorities:                xdstp://AUTHORITY/... names go to its servers
      "auth.example": {xds_servers: [...]}   (none: the default servers)
    linger: 5s                  upstream subscription kept after the last watcher left (0: none)
    unavailable_after: 10s      uncached resources get TP3 UNAVAILABLE when no upstream is reachable this long
    does_not_exist_after: 15s   a connected upstream saying nothing of a subscribed name this long: it does not exist
    move_wait: 1s               a removal a client from elsewhere may still refer to waits this long for the
                                upstream's move of the reference (raise above 1s for snapshots of >10,000 names)
  cache:
    max_unreferenced: 10000     unwatched resources kept (LRU); 0 keeps none
    persist_path: ""            warm-restart file (and PATH.gateway), rewritten after a change
    persist_interval: 1s        at most one write per interval: a crash loses at most its changes
  readiness:
    require_sync: false         /readyz 200 only once synced with an upstream (false: a
                                warm-restart file loaded at start is enough)
  shutdown:
    drain_window: 5s            on SIGTERM/SIGINT and POST /drain, the client connections are
                                closed (their streams end with UNAVAILABLE) spread over this
                                window (0: all at once)
  limits:
    max_names_per_request: 100000  names one request (un)subscribes; over it, or over
                                   max_subscriptions_per_stream, the request is refused
                                   for its type only and the stream goes on
    max_recv_message_bytes: 4194304
    max_subscriptions_per_stream: 100000
    max_streams_per_connection: 100
    new_streams_per_second: 5000   beyond it new streams get RESOURCE_EXHAUSTED (0: off)
    max_connection_age: 30m        GOAWAY (±10% jitter) so clients rebalance (0: off)
    keepalive_min_time: 10s        faster client pings are refused
  keying:
    group_by: []                node fields splitting clients into upstream groups: id, cluster,
                                locality.region|zone|sub_zone, metadata.KEY (default: one group)
    dynamic_parameters_from_node: {}   TP2 parameter name -> node field, for clients without locators
  authorization:                what each client may subscribe to (default: all but secrets without mTLS)
    allow_secrets_without_mtls: false
    rules: [{identities, nodes, clusters, types, authorities, names}]   globs; first match allows
  rollout:                      guarded rollout (off when absent): a changed resource goes to canaries first
    canary_fraction: 0.1        of each resource's watchers, chosen from node ids (at least one client)
    hold: 2s                    how long the others wait for the canaries' ACK/NACK (positive)
    max_nack_ratio: 0           above it the rollout halts; the others keep the last accepted version
  rest:                         REST-JSON polling (absent: off): POST /v3/discovery:TYPE
    listen: "127.0.0.1:18080"   HTTP address (TLS as the tls section says)
    poll_timeout: 30s           an unchanged poll is held this long, then answered 304 (positive)
  gateway:                      gateway.control.v1 on --listen (always on; these tune it)
    group_by: [cluster]         request fields keying snapshot groups: node_id, cluster,
                                supported_features ([]: one group, the relay's node upstream)
    report_retries: 3           attempts to forward one ReportStatus upstream (positive)
  tls:                          downstream TLS (absent: plaintext)
    cert_file: server.pem       certificate chain (PEM), leaf first
    key_file: server-key.pem    its private key
    client_ca_file: ca.pem      set: clients must present a certificate it signed (mTLS)
    refresh_interval: 10m       the files are re-read this often (here and in channel_creds):
                                new handshakes use them, open connections go on
`

const usageTail = `
gRPC health (grpc.health.v1.Health, Check and Watch) on listen, service "": SERVING while
/readyz answers 200, NOT_SERVING otherwise (draining included); answered during a drain.

Shutdown: on SIGTERM or SIGINT /readyz turns 503 at once, clients get GOAWAY, the client
connections are closed oldest first over shutdown.drain_window (their xDS streams end with
UNAVAILABLE; held REST polls get 503), and the relay exits as soon as none is left (at most
the window plus 2 s). A second signal stops at once. Unlike POST /drain, a shutdown is never
undone (DELETE /drain does not end it).

Exit status: 0 after a clean shutdown; 1 on a bad config, a port in use or a
serving error; 2 on a bad flag.
`

// writeUsage writes the help: the commands, every flag, the config sections,
// every admin endpoint.
func writeUsage(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	b.WriteString(usageHead)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		usage = strings.ReplaceAll(usage, "\n", "\n"+strings.Repeat(" ", 27))
		fmt.Fprintf(&b, "%-26s %s\n", line, usage)
	})
	b.WriteString(usageConfig)
	b.WriteString("\nAdmin HTTP API (on admin; GET /healthz, /readyz and /metrics on probe_listen too):\n")
	for _, e := range admin.Endpoints {
		fmt.Fprintf(&b, "  %s\n      %s\n", e.Route, e.Doc)
	}
	b.WriteString(usageTail)
	_, _ = io.WriteString(w, b.String())
}
