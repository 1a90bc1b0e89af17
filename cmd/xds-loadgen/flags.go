package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// options are the parsed command line.
type options struct {
	cfg           Config
	json          bool
	logLevel      string
	progressEvery time.Duration
	cpuProfile    string
	version       bool
}

const usageHeader = `xds-loadgen simulates many xDS clients against an xDS server and reports how
fast they sync and how fast changes reach them.

Usage: xds-loadgen --target HOST:PORT [flags]

Envoy mode subscribes to listeners and clusters by wildcard, then to the route
configurations and endpoints they name; grpc mode asks for one listener by name
(--lds-name) and follows it to routes, clusters and endpoints. Propagation is
measured from the creation stamp xds-democp writes into every changed resource.

Node templates (--node-cluster, --locality, --node-metadata) take {i} (the
client's index), {i%N} (the index modulo N) and {id} (its node id), e.g.
--node-cluster 'blue-{i%2}' --locality 'region-1/zone-{i%3}' --node-metadata
'env=env-{i%2},team=t{i%5}': to exercise the relay's group_by,
dynamic_parameters_from_node and authorization.

Losses: xds-democp never deletes a resource, so a client told that a resource
it holds is gone (a Delta removal, an omission from a SotW LDS/CDS response, a
TP3 NOT_FOUND) was lied to; such losses fail the run (--allow-removals against
a control plane that does delete).

With --dialect gateway the clients are gateway.control.v1 data planes of the
clusters gw-0… (xds-democp --dialect gateway): SotW clients take snapshots
(propagation from their generated_at), Delta clients resources (from the
stamps of changed routes); a client is synced once answered (Delta: every type).

The exit status is 1 when a client did not sync within --sync-timeout or lost
a resource.

Flags:
`

// parseFlags parses args (without the program name). It returns flag.ErrHelp
// after printing usage for --help.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var raw rawFlags
	fs := o.flagSet(&raw, stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("loadgen: unexpected argument %q", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	if err := o.apply(&raw); err != nil {
		return o, err
	}
	if err := o.check(); err != nil {
		return o, err
	}
	return o, nil
}

// rawFlags are the flags parsed as strings, for apply to turn into options.
type rawFlags struct {
	ramp, mode, protocol, params, metadata, dialect, gwTypes string
	tlsFiles                                                 TLSFiles
	useTLS                                                   bool
}

// flagSet defines every flag, into o and raw.
func (o *options) flagSet(raw *rawFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("xds-loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fleet.PrintFlagDefaults(fs)
	}
	fs.StringVar(&o.cfg.Target, "target", "", "xDS server address host:port (required)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (where the simulator's own time goes)")
	fs.IntVar(&o.cfg.Clients, "clients", 100, "number of simulated clients")
	fs.IntVar(&o.cfg.StreamsPerConn, "streams-per-conn", 1, "clients sharing one gRPC connection (1: a connection per client)")
	fs.StringVar(&raw.ramp, "ramp", "0", "client start rate like 50/s (0: all at once)")
	fs.StringVar(&raw.mode, "mode", string(ModeEnvoy), "client behaviour: envoy or grpc")
	fs.StringVar(&raw.protocol, "protocol", string(ProtocolSotW), "xDS protocol: sotw or delta (gateway: StreamConfiguration or DeltaStreamConfiguration)")
	fs.StringVar(&raw.dialect, "dialect", string(DialectXDS), "protocol the clients speak: xds, or gateway (gateway.control.v1 data planes)")
	fs.IntVar(&o.cfg.GatewayClusters, "gateway-clusters", 1, "gateway: client i presents the cluster gw-(i mod N)")
	fs.StringVar(&raw.gwTypes, "gateway-types", "listener,httproute,grpcroute,streamroute,backend",
		"gateway: types to subscribe (all, or listener, httproute, grpcroute, streamroute, backend, secret)")
	fs.StringVar(&o.cfg.LDSName, "lds-name", fleet.ListenerName(0), "listener a grpc-mode client asks for")
	fs.DurationVar(&o.cfg.Duration, "duration", 20*time.Second, "run time after all clients synced")
	fs.Int64Var(&o.cfg.Updates, "updates", 0, "end early once every synced client has seen this many updates (0: run for --duration)")
	fs.DurationVar(&o.cfg.SyncTimeout, "sync-timeout", 30*time.Second, "time each client has to sync after it starts")
	fs.Float64Var(&o.cfg.NACKRatio, "nack-ratio", 0, "fraction of clients that NACK every response")
	fs.Float64Var(&o.cfg.SlowRatio, "slow", 0, "fraction of clients that read slowly")
	fs.DurationVar(&o.cfg.SlowDelay, "slow-delay", 250*time.Millisecond, "pause of a slow client before each read")
	fs.Float64Var(&o.cfg.StuckRatio, "stuck", 0, "fraction of clients that stop reading their stream once synced and keep it open\n(gRPC's smallest flow-control windows: the server's sends to them block)")
	fs.DurationVar(&o.progressEvery, "progress-every", 0, "interval of the progress line on stderr (0: 1s on a terminal, else 5s)")
	fs.BoolVar(&o.json, "json", false, "print the final summary as JSON")
	fs.StringVar(&o.cfg.NodePrefix, "node-prefix", "xds-loadgen", "node id prefix (ids are PREFIX-0, PREFIX-1, ...)")
	fs.StringVar(&raw.params, "params", "", "TP2 dynamic parameters, grpc mode: k=v,k2=v2 for every client, or sets split by | dealt\nround-robin (env=prod|env=test); names go out as resource locators")
	fs.StringVar(&o.cfg.Node.Cluster, "node-cluster", "", "node cluster template (default: the node prefix)")
	fs.StringVar(&o.cfg.Node.Locality, "locality", "", "node locality template region/zone/sub_zone (default: region-1/zone-a)")
	fs.StringVar(&raw.metadata, "node-metadata", "", "node metadata templates k=v,k2=v2 (string values)")
	fs.StringVar(&raw.tlsFiles.CAFile, "tls-ca", "", "connect with TLS, verifying the server with this CA `FILE` (PEM)")
	fs.StringVar(&raw.tlsFiles.CertFile, "tls-cert", "", "client certificate `FILE` for mTLS (with --tls-key)")
	fs.StringVar(&raw.tlsFiles.KeyFile, "tls-key", "", "client key `FILE` for mTLS (with --tls-cert)")
	fs.StringVar(&raw.tlsFiles.ServerName, "tls-server-name", "", "`NAME` the server's certificate must carry (default: the target's host)")
	fs.BoolVar(&raw.useTLS, "tls", false, "connect with TLS (the system roots unless --tls-ca; implied by the other --tls-* flags)")
	fs.BoolVar(&o.cfg.LoadReport, "lrs", false, "each client also opens an LRS StreamLoadStats on its connection and reports small\nsynthetic load for the clusters it holds, at the interval the server gives")
	fs.BoolVar(&o.cfg.AllowRemovals, "allow-removals", false, "do not fail the run on losses (a control plane that deletes resources)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return fs
}

// apply turns the flags parsed as strings into o.cfg.
func (o *options) apply(raw *rawFlags) error {
	var err error
	if o.cfg.Ramp, err = fleet.ParseRate(raw.ramp); err != nil {
		return fmt.Errorf("loadgen: --ramp: %w", err)
	}
	o.cfg.Mode, o.cfg.Protocol, o.cfg.Dialect = Mode(raw.mode), Protocol(raw.protocol), Dialect(raw.dialect)
	if o.cfg.Dialect == DialectGateway {
		if o.cfg.GatewayTypes, err = parseGatewayTypes(raw.gwTypes); err != nil {
			return err
		}
	}
	if o.cfg.Params, err = parseParams(raw.params); err != nil {
		return err
	}
	if raw.metadata != "" {
		o.cfg.Node.Metadata = map[string]string{}
		for _, kv := range strings.Split(raw.metadata, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("loadgen: --node-metadata %q: want k=v[,k=v]", raw.metadata)
			}
			o.cfg.Node.Metadata[k] = v
		}
	}
	if raw.useTLS || raw.tlsFiles != (TLSFiles{}) {
		if (raw.tlsFiles.CertFile == "") != (raw.tlsFiles.KeyFile == "") {
			return errors.New("loadgen: --tls-cert and --tls-key go together")
		}
		o.cfg.TLS = &raw.tlsFiles
	}
	return nil
}

// check validates the options as the flags name them.
func (o *options) check() error {
	if o.cfg.GatewayClusters < 1 {
		return fmt.Errorf("loadgen: --gateway-clusters %d: want at least 1", o.cfg.GatewayClusters)
	}
	if o.cfg.StreamsPerConn < 1 {
		return fmt.Errorf("loadgen: --streams-per-conn %d: want at least 1", o.cfg.StreamsPerConn)
	}
	if o.cfg.SyncTimeout <= 0 {
		return errors.New("loadgen: --sync-timeout must be positive")
	}
	if o.progressEvery < 0 {
		return fmt.Errorf("loadgen: --progress-every %v: want non-negative", o.progressEvery)
	}
	if _, err := o.cfg.withDefaults(); err != nil {
		return err
	}
	return nil
}

// parseParams parses --params: parameter sets split by '|', each "k=v,k=v".
func parseParams(s string) ([]map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []map[string]string
	for _, set := range strings.Split(s, "|") {
		m := map[string]string{}
		for _, kv := range strings.Split(set, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("loadgen: --params %q: want k=v[,k=v][|k=v…]", s)
			}
			m[k] = v
		}
		out = append(out, m)
	}
	return out, nil
}
