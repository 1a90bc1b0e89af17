// Command xds-bench runs the fan-out benchmark suite: go-control-plane
// serving N clients directly (xds-democp, the baseline) against xds-democp →
// xds-relay → N clients (the subject) against a bare grpc-go server writing
// one pre-encoded response to the same clients (the gRPC floor, floor.go) and
// plain TCP writes of the same bytes to N loopback sockets (the limit), all on
// this machine in one run, and
// prints a Markdown table of the targets (see docs/BENCHMARKS.md). The fleet
// shapes of issue 13 are runs of their own: proxyless-gRPC clients, clients
// that stop reading beside healthy ones, latency probes during a fan-out and
// relays in tiers.
//
// It drives the binaries built by `make build` (xds-democp with --control,
// xds-relay, xds-loadgen) as child processes and measures them from the
// outside: /proc/PID/{stat,status,io} for CPU, RSS and bytes written, the
// relay's /metrics, and xds-loadgen's JSON summary. Run it with --help.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// version is set by -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, ok := childCommand(ctx, os.Args[1:])
	if !ok {
		code = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}

// childCommand runs the hidden command args names, the measured child of a
// run (tcp-writer: the TCP limit; grpc-floor: the gRPC floor), and returns
// its exit code; ok is false when args name none.
func childCommand(ctx context.Context, args []string) (code int, ok bool) {
	switch {
	case len(args) > 0 && args[0] == "tcp-writer":
		return tcpWriter(args[1:], os.Stdin, os.Stdout, os.Stderr), true
	case len(args) > 0 && args[0] == floorCommand:
		return grpcFloor(ctx, args[1:], os.Stderr), true
	}
	return 0, false
}

// options are the parsed command line.
type options struct {
	bin            string
	clients        int
	clusters       int
	runs           map[string]bool
	deltaClients   int
	streams        int
	streamsPerConn int
	relayMemLimit  string
	stuckClients   int
	healthyClients int
	stuckFill      int
	limitRounds    int
	profileProto   string
	jsonOut        string
	logDir         string
	syncTimeout    time.Duration
	lrsClients     int
	lrsInterval    time.Duration
	lrsWindow      time.Duration
	version        bool
}

const usageHeader = `xds-bench measures the fan-out of one cluster change: go-control-plane serving
the clients directly (baseline), through xds-relay (relay), a bare grpc-go
server writing the same response (floor), and plain TCP writes of the same
bytes (limit), side by side on this machine. It prints a
Markdown table to stdout and its progress to stderr.

Usage: xds-bench [flags]

It needs xds-democp, xds-relay and xds-loadgen in --bin (make build), about
2 file descriptors per client per process (ulimit -n), and a quiet machine.

Flags:
`

// runsUsage is the usage of --runs.
const runsUsage = "runs, comma-separated: limit (TCP writes), floor (issue 26: a bare " +
	"grpc-go server writing the same pre-encoded response, with Envoy-like clients, and with gRPC-like ones when grpc runs), " +
	"sotw (baseline and relay, " +
	"targets 1-4), delta (target 6; beside floor and limit, issue 26's Delta rows), streams (target 5; takes minutes; with a heap profile), profile (a relay run with CPU and heap profiles); " +
	"the fleet shapes of issue 13: grpc (proxyless-gRPC clients, baseline and relay), stuck (clients that stop reading " +
	"beside healthy ones), latency (a new client and the admin page during a fan-out), tiered (democp → relay → 2 relays " +
	"→ clients); shapes is limit,floor,sotw,grpc,stuck,latency,tiered; lrs (issue 24: --lrs-clients clients through one relay, " +
	"without and then with load reports every --lrs-interval)"

// parseFlags parses args (without the program name). It returns flag.ErrHelp
// after printing usage for --help.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("xds-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if arg != "" {
				line += " " + arg
			}
			line += "\n    \t" + usage
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				line += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintln(fs.Output(), line)
		})
	}
	fs.StringVar(&o.bin, "bin", "", "directory holding xds-democp, xds-relay and xds-loadgen (default: this program's directory)")
	fs.IntVar(&o.clients, "clients", 10000, "simulated Envoy-like clients, one connection each")
	fs.IntVar(&o.clusters, "clusters", 100, "clusters in the fleet (one of them changes)")
	runs := fs.String("runs", "limit,floor,sotw,delta", runsUsage)
	fs.IntVar(&o.deltaClients, "delta-clients", 0, "Delta clients (0: --clients)")
	fs.IntVar(&o.streams, "streams", 100000, "streams held by one relay in the streams run")
	fs.IntVar(&o.streamsPerConn, "streams-per-conn", 10, "streams per connection in the streams run")
	fs.StringVar(&o.relayMemLimit, "relay-gomemlimit", "", "GOMEMLIMIT of every relay (e.g. 1843MiB, what the Helm chart sets for a 2 GiB "+
		"memory limit; default: this program's environment)")
	fs.IntVar(&o.stuckClients, "stuck-clients", 5000, "clients that stop reading in the stuck run")
	fs.IntVar(&o.healthyClients, "healthy-clients", 1000, "healthy clients beside them in the stuck run")
	fs.IntVar(&o.stuckFill, "stuck-fill", 0, "changes made in the stuck run to fill the stuck streams' flow-control windows "+
		"before the measured change (0: enough for 128 KiB of responses)")
	fs.IntVar(&o.limitRounds, "limit-rounds", 3, "rounds of the TCP limit after one warm-up round (the median is reported)")
	fs.StringVar(&o.profileProto, "profile-protocol", "sotw", "protocol of the profile run: sotw or delta")
	fs.StringVar(&o.jsonOut, "json", "", "also write every measurement as JSON to this file")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the processes' logs and profiles (default: a new temporary directory)")
	fs.IntVar(&o.lrsClients, "lrs-clients", 0, "clients of the lrs run, each reporting load (0: --clients)")
	fs.DurationVar(&o.lrsInterval, "lrs-interval", time.Second, "load reporting interval xds-democp asks for in the lrs run")
	fs.DurationVar(&o.lrsWindow, "lrs-window", 30*time.Second, "measured window of each phase of the lrs run")
	fs.DurationVar(&o.syncTimeout, "sync-timeout", 5*time.Minute, "time the clients have to sync")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.runs = map[string]bool{}
	for _, r := range strings.Split(*runs, ",") {
		switch r = strings.TrimSpace(r); r {
		case "limit", "floor", "sotw", "delta", "streams", "profile", "grpc", "stuck", "latency", "tiered", "lrs":
			o.runs[r] = true
		case "shapes":
			for _, s := range []string{"limit", "floor", "sotw", "grpc", "stuck", "latency", "tiered"} {
				o.runs[s] = true
			}
		case "":
		default:
			return o, fmt.Errorf("bench: --runs: unknown run %q (want limit, floor, sotw, delta, streams, profile, grpc, "+
				"stuck, latency, tiered, lrs or shapes)", r)
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	case o.clients < 1:
		return o, fmt.Errorf("bench: --clients %d: want at least 1", o.clients)
	case o.clusters < 1:
		return o, fmt.Errorf("bench: --clusters %d: want at least 1", o.clusters)
	case o.deltaClients < 0:
		return o, fmt.Errorf("bench: --delta-clients %d: want non-negative", o.deltaClients)
	case o.streams < 1:
		return o, fmt.Errorf("bench: --streams %d: want at least 1", o.streams)
	case o.streamsPerConn < 1:
		return o, fmt.Errorf("bench: --streams-per-conn %d: want at least 1", o.streamsPerConn)
	case o.stuckClients < 1:
		return o, fmt.Errorf("bench: --stuck-clients %d: want at least 1", o.stuckClients)
	case o.healthyClients < 1:
		return o, fmt.Errorf("bench: --healthy-clients %d: want at least 1", o.healthyClients)
	case o.stuckFill < 0:
		return o, fmt.Errorf("bench: --stuck-fill %d: want non-negative", o.stuckFill)
	case o.limitRounds < 1:
		return o, fmt.Errorf("bench: --limit-rounds %d: want at least 1", o.limitRounds)
	case o.profileProto != "sotw" && o.profileProto != "delta":
		return o, fmt.Errorf("bench: --profile-protocol %q: want sotw or delta", o.profileProto)
	case o.lrsClients < 0:
		return o, fmt.Errorf("bench: --lrs-clients %d: want non-negative", o.lrsClients)
	case o.lrsInterval < 100*time.Millisecond:
		return o, fmt.Errorf("bench: --lrs-interval %v: want at least 100ms", o.lrsInterval)
	case o.lrsWindow <= 0:
		return o, fmt.Errorf("bench: --lrs-window %v: want positive", o.lrsWindow)
	case o.syncTimeout <= 0:
		return o, fmt.Errorf("bench: --sync-timeout %v: want positive", o.syncTimeout)
	}
	if o.deltaClients == 0 {
		o.deltaClients = o.clients
	}
	if o.lrsClients == 0 {
		o.lrsClients = o.clients
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
		fmt.Fprintln(stderr, "xds-bench:", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, "xds-bench", version)
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "xds-bench:", err)
		return 1
	}
	if o.bin == "" {
		o.bin = filepath.Dir(self)
	}
	for _, name := range []string{"xds-democp", "xds-relay", "xds-loadgen"} {
		if _, err := os.Stat(filepath.Join(o.bin, name)); err != nil {
			fmt.Fprintf(stderr, "xds-bench: %v (run make build, or pass --bin)\n", err)
			return 1
		}
	}
	if o.logDir == "" {
		if o.logDir, err = os.MkdirTemp("", "xds-bench-"); err != nil {
			fmt.Fprintln(stderr, "xds-bench:", err)
			return 1
		}
	} else if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		fmt.Fprintln(stderr, "xds-bench:", err)
		return 1
	}
	e := env{bin: o.bin, self: self, logDir: o.logDir, clusters: o.clusters, syncTimeout: o.syncTimeout, log: stderr}
	if o.relayMemLimit != "" {
		e.relayEnv = []string{"GOMEMLIMIT=" + o.relayMemLimit}
	}
	e.logf("logs and profiles in %s", o.logDir)

	s, err := runSuite(ctx, e, o, self, append([]string{"xds-bench"}, args...))
	if err != nil {
		fmt.Fprintln(stderr, "xds-bench:", err)
		return 1
	}
	if err := s.writeMarkdown(stdout); err != nil {
		fmt.Fprintln(stderr, "xds-bench:", err)
		return 1
	}
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err == nil {
			err = os.WriteFile(o.jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "xds-bench:", err)
			return 1
		}
	}
	if len(s.Errors) > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

// runSuite runs every measurement in turn. A run that fails is recorded in
// Errors and the suite goes on; only setup errors and cancellation stop it.
func runSuite(ctx context.Context, e env, o options, self string, command []string) (*suiteResult, error) {
	p, err := cdsPayload(o.clusters)
	if err != nil {
		return nil, err
	}
	s := &suiteResult{
		Machine:      describeMachine(),
		Command:      strings.Join(command, " "),
		Clients:      o.clients,
		Clusters:     o.clusters,
		PayloadBytes: len(p.SotW),
		ClusterBytes: p.Cluster,
		Errors:       map[string]string{},
	}
	fail := func(name string, err error) {
		s.Errors[name] = err.Error()
		e.logf("%s failed: %v", name, err)
	}

	if o.runs["limit"] {
		if s.Limit, err = runLimit(ctx, e, self, o.clients, o.limitRounds, p); err != nil {
			fail("limit", err)
		}
	}
	runs := planRuns(o, s)
	for _, r := range runs {
		if ctx.Err() != nil {
			return s, nil
		}
		res, err := runSubject(ctx, e, r.rc)
		if err != nil {
			fail(r.rc.Name, err)
			continue
		}
		*r.dst = res
	}
	if o.runs["stuck"] && ctx.Err() == nil {
		if s.Stuck, err = runStuck(ctx, e, o.stuckClients, o.healthyClients, o.stuckFill, len(p.SotW)); err != nil {
			fail("stuck", err)
		}
	}
	if o.runs["tiered"] && ctx.Err() == nil {
		if s.Tiered, err = runTiered(ctx, e, o.clients); err != nil {
			fail("tiered", err)
		}
	}
	if o.runs["lrs"] && ctx.Err() == nil {
		if s.LRS, err = runLRS(ctx, e, o.lrsClients, o.lrsInterval, o.lrsWindow); err != nil {
			fail("lrs", err)
		}
	}
	if s.Profile != nil && s.Profile.CPUProfile != "" {
		s.ProfileTop = pprofTop(ctx, s.Profile.CPUProfile)
	}
	return s, nil
}

// plannedRun is one runSubject of the suite and where its result goes.
type plannedRun struct {
	dst **runResult
	rc  runConfig
}

// sotwRun is the configuration of a run of clients Envoy-like SotW clients
// and one change.
func sotwRun(name string, relay bool, clients int) runConfig {
	return runConfig{Name: name, Relay: relay, Protocol: "sotw", Mode: modeEnvoy, Clients: clients, StreamsPerConn: 1,
		Change: true}
}

// planRuns lists the runSubject runs of o, in order, into s.
func planRuns(o options, s *suiteResult) []plannedRun {
	var runs []plannedRun
	if o.runs["floor"] {
		// The floor of each client shape that runs; Envoy-like on its own.
		if o.runs["sotw"] || !o.runs["grpc"] {
			rc := sotwRun("floor-sotw", false, o.clients)
			rc.Floor = true
			runs = append(runs, plannedRun{&s.FloorSotW, rc})
		}
		if o.runs["grpc"] {
			rc := sotwRun("floor-grpc", false, o.clients)
			rc.Floor, rc.Mode = true, modeGRPC
			runs = append(runs, plannedRun{&s.FloorGRPC, rc})
		}
	}
	if o.runs["sotw"] {
		runs = append(runs, plannedRun{&s.Baseline, sotwRun("baseline-sotw", false, o.clients)},
			plannedRun{&s.Relay, sotwRun("relay-sotw", true, o.clients)})
	}
	if o.runs["delta"] {
		for _, r := range []plannedRun{
			{&s.BaselineDelta, sotwRun("baseline-delta", false, o.deltaClients)},
			{&s.RelayDelta, sotwRun("relay-delta", true, o.deltaClients)},
		} {
			r.rc.Protocol = "delta"
			runs = append(runs, r)
		}
	}
	if o.runs["streams"] {
		rc := sotwRun("relay-streams", true, o.streams)
		rc.StreamsPerConn, rc.Change = o.streamsPerConn, false
		rc.Profile = true // a heap profile of the streams once synced, taken after their RSS is read
		runs = append(runs, plannedRun{&s.Streams, rc})
	}
	if o.runs["grpc"] {
		for _, r := range []plannedRun{
			{&s.BaselineGRPC, sotwRun("baseline-grpc", false, o.clients)},
			{&s.RelayGRPC, sotwRun("relay-grpc", true, o.clients)},
		} {
			r.rc.Mode = modeGRPC
			runs = append(runs, r)
		}
	}
	if o.runs["latency"] {
		rc := sotwRun("relay-latency", true, o.clients)
		rc.Probe = true
		runs = append(runs, plannedRun{&s.Latency, rc})
	}
	if o.runs["profile"] {
		rc := sotwRun("relay-profile-"+o.profileProto, true, o.clients)
		rc.Profile, rc.Protocol = true, o.profileProto
		runs = append(runs, plannedRun{&s.Profile, rc})
	}
	return runs
}

// pprofTop returns `go tool pprof -top` of a profile, or a note when the Go
// tool is not available.
func pprofTop(ctx context.Context, path string) string {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).Output()
	if err != nil {
		return fmt.Sprintf("(go tool pprof -top %s: %v)", path, err)
	}
	return string(out)
}

// describeMachine returns the machine the suite runs on.
func describeMachine() machine {
	m := machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: runtime.Version(),
		Kernel:    "unknown",
		Date:      time.Now().UTC().Format("2006-01-02"),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
