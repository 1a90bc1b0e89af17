// Command xds-democp is a small authoritative xDS control plane for demos and
// load tests: it serves a generated fleet of listeners, routes, clusters and
// endpoints (see internal/fleet) over ADS SotW and Delta and the per-type
// services, and can churn resources at a fixed rate, stamping each change with
// its creation time. Run it with --help for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed command line.
type options struct {
	dialect  string
	gateway  gatewayOptions
	listen   string
	control  string
	server   fleet.ServerConfig
	duration time.Duration
	logLevel string
	version  bool
}

const usageHeader = `xds-democp serves a generated xDS configuration for demos and load tests.

Usage: xds-democp [flags]

Listener i uses route configuration i mod --routes; route configurations route
to the clusters; every cluster is an EDS cluster over ADS. With --churn, each
change regenerates --churn-count resources of the next type in --churn-types
and stamps them with filter_metadata["xds-democp"].created_unix_nano (see
internal/fleet), which xds-loadgen uses to measure propagation.

Flags:
`

// parseFlags parses args (without the program name). It returns flag.ErrHelp
// after printing usage for --help.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("xds-democp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fleet.PrintFlagDefaults(fs)
	}
	var style, churn, churnTypes, variants string
	spec := &o.server.Spec
	fs.StringVar(&o.listen, "listen", "127.0.0.1:18000", "xDS gRPC listen address")
	fs.StringVar(&o.dialect, "dialect", "xds", "protocol served: xds, or gateway (gateway.control.v1: per cluster gw-N a snapshot\nof --listeners listeners, --routes routes, --clusters backends; --churn changes routes)")
	fs.IntVar(&o.gateway.clusters, "gateway-clusters", 1, "gateway: clusters gw-0 … gw-(N-1), one snapshot each")
	fs.IntVar(&o.gateway.secrets, "secrets", 1, "gateway: SecretMaterial per snapshot (listeners go HTTPS with them)")
	fs.StringVar(&o.control, "control", "", "HTTP address of the control endpoint for load tools (POST /change?type=cds&count=1); empty disables")
	fs.IntVar(&spec.Clusters, "clusters", 100, "number of clusters (and ClusterLoadAssignments)")
	fs.IntVar(&spec.Listeners, "listeners", 1, "number of listeners")
	fs.IntVar(&spec.Routes, "routes", 1, "number of route configurations")
	fs.IntVar(&spec.EndpointsPerCluster, "endpoints-per-cluster", 2, "endpoints in each ClusterLoadAssignment")
	fs.StringVar(&style, "style", string(fleet.StyleEnvoy), "listener style: envoy (socket listeners) or grpc (api_listener)")
	fs.StringVar(&spec.Authority, "authority", "", "name every resource xdstp://AUTHORITY/TYPE/NAME (federation; empty: legacy names)")
	fs.StringVar(&variants, "variants", "", "serve every resource as TP2 variants, one per value: key=v1,v2 (ADS only; clients\nsubscribe by name with parameters, e.g. xds-loadgen --mode grpc --params key=v1|key=v2)")
	fs.StringVar(&churn, "churn", "0", "change rate like 5/s, 30/m (0: no changes)")
	fs.StringVar(&churnTypes, "churn-types", "eds", "resource types changed in turn, e.g. cds,eds (lds, rds, cds, eds)")
	fs.IntVar(&o.server.ChurnCount, "churn-count", 1, "resources changed per change")
	fs.DurationVar(&o.server.LoadReportInterval, "lrs-interval", 0, "serve load reporting (LRS) too, asking every stream for all clusters at this\ninterval, e.g. 1s; the reports received are counted and logged at exit (0: no LRS)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug (one line per change), info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("democp: unexpected argument %q", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	var err error
	if spec.Style, err = fleet.ParseStyle(style); err != nil {
		return o, fmt.Errorf("democp: --style: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return o, fmt.Errorf("democp: %w", err)
	}
	if o.server.Variants, err = fleet.ParseVariants(variants); err != nil {
		return o, fmt.Errorf("democp: --variants: %w", err)
	}
	if o.server.Churn, err = fleet.ParseRate(churn); err != nil {
		return o, fmt.Errorf("democp: --churn: %w", err)
	}
	if o.server.ChurnKinds, err = fleet.ParseKinds(churnTypes); err != nil {
		return o, fmt.Errorf("democp: --churn-types: %w", err)
	}
	if o.server.ChurnCount < 1 {
		return o, fmt.Errorf("democp: --churn-count %d: want at least 1", o.server.ChurnCount)
	}
	switch {
	case o.dialect != "xds" && o.dialect != "gateway":
		return o, fmt.Errorf("democp: --dialect %q: want xds or gateway", o.dialect)
	case o.gateway.clusters < 1:
		return o, fmt.Errorf("democp: --gateway-clusters %d: want at least 1", o.gateway.clusters)
	case o.gateway.secrets < 0:
		return o, fmt.Errorf("democp: --secrets %d: want non-negative", o.gateway.secrets)
	case o.dialect == "gateway" && (o.control != "" || variants != ""):
		return o, errors.New("democp: --control and --variants are xDS only")
	}
	if o.duration < 0 {
		return o, fmt.Errorf("democp: --duration %v: want non-negative", o.duration)
	}
	return o, nil
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "xds-democp:", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, "xds-democp", version)
		return 0
	}
	log, err := fleet.NewConsoleLogger(o.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "xds-democp:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	o.server.Logger = log
	srv, err := fleet.NewServer(o.server)
	if err != nil {
		fmt.Fprintln(stderr, "xds-democp:", err)
		return 2
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintln(stderr, "xds-democp: listen:", err)
		return 1
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	if o.dialect == "gateway" {
		runGateway(ctx, o, lis, log)
		return 0
	}
	if o.control != "" {
		stopControl, err := serveControl(o.control, srv, log)
		if err != nil {
			_ = lis.Close()
			fmt.Fprintln(stderr, "xds-democp:", err)
			return 1
		}
		defer stopControl()
	}
	if err := srv.Serve(ctx, lis); err != nil {
		fmt.Fprintln(stderr, "xds-democp:", err)
		return 1
	}
	if o.server.LoadReportInterval > 0 {
		ls := srv.LoadStats()
		log.Info("load reports received", zap.Int64("streams", ls.Streams), zap.Int64("reports", ls.Reports),
			zap.Int64("cluster_stats", ls.ClusterStats), zap.Int64("requests", ls.Requests))
	}
	log.Info("xds-democp stopped", zap.Uint64("changes", srv.Changes()))
	return 0
}
