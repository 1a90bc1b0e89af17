// Command xds-relay is the caching xDS relay: it loads the config (file and
// flags), serves downstream xDS on --listen, the admin HTTP API on --admin
// and the probes on --probe-listen, and drains on SIGTERM or SIGINT. See `xds-relay --help` and docs/INTERFACE.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/grpclog"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/episodes"
	"github.com/xds-relay/xds-relay/relay"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// drainGrace is how long after shutdown.drain_window the drain may last
// before the remaining streams are closed (docs/INTERFACE.md: the relay exits
// within the window plus 2 s; the rest of the second goes to closing the
// upstreams, the warm-restart file and the admin server).
const drainGrace = time.Second

// grpcQuiet ends an episode of grpc's warnings about closing connections:
// a drain spreads its closes over shutdown.drain_window.
const grpcQuiet = 10 * time.Second

func main() {
	relay.Version = version
	if os.Getenv("GOGC") == "" {
		// A relay's memory is mostly long-lived stream state and its work
		// comes in bursts (connection storms, fan-outs): collect when the heap
		// has grown by half instead of doubled, for a lower steady RSS per
		// client at a small CPU cost. GOGC in the environment overrides it.
		debug.SetGCPercent(50)
	}
	var grpcEpisodes *episodes.Log // grpc's per-connection warnings
	if o, err := parseArgs(os.Args[1:], io.Discard); err == nil {
		// grpc's own warnings and errors (a certificate file that no longer
		// loads, a transport failure) go to the same log, as JSON. grpc's
		// logger is process-wide and set once, before grpc starts.
		// Its per-connection warnings about closing connections (one per
		// client at a drain) are one episode: the first line and a count.
		log, _ := newLogger(o.logLevel, o.logFormat, os.Stderr)
		glog := log.Named("grpc").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))
		grpcEpisodes = episodes.New(glog, grpcQuiet)
		grpclog.SetLoggerV2(episodes.GRPCLogger(glog, grpcEpisodes))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// After the first signal, a second one kills the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if grpcEpisodes != nil {
		grpcEpisodes.Close() // the summary of the shutdown's drain
	}
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // bad config, port in use, serving error
	exitUsage = 2 // bad flag
)

// run is the whole command: args are the arguments after the program name.
// It returns when ctx is cancelled (after draining) or on an error, with the
// process exit code. Errors are one line on stderr; logs go to stderr too.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "xds-relay: "+format+"\n", a...)
		return code
	}
	o, cfg, code, done := configure(args, stdout, fail)
	if done {
		return code
	}

	log, level := newLogger(o.logLevel, o.logFormat, stderr)
	defer func() { _ = log.Sync() }()

	adminOpts, err := adminOptions(cfg, level)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	lis, err := listen(cfg)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	r, err := relay.New(cfg, log)
	if err != nil {
		lis.close()
		return fail(exitError, "%v", err)
	}

	served := make(chan error, 1)
	go func() { served <- r.Serve(lis.xds) }()
	hs := newHTTPServers(log)
	hs.serve("admin", lis.admin, admin.Handler(r, adminOpts...))
	hs.serve("probe", lis.probe, admin.ProbeHandler(r))
	restDone := make(chan error, 1)
	if lis.rest != nil {
		go func() { restDone <- r.ServeREST(lis.rest) }()
	}
	logServing(log, cfg, lis)

	// Wait for a signal, or for a server to fail: Serve, ServeREST and the
	// HTTP servers return before the shutdown only on an error. (POST /drain
	// stops none of them.)
	code = exitOK
	serveReturned, restReturned, httpReturned := false, lis.rest == nil, 0
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining", zap.Duration("drain_window", cfg.Shutdown.DrainWindow))
	case err := <-served:
		serveReturned = true
		if err == nil {
			err = errors.New("relay stopped serving")
		}
		log.Error("serve", zap.Error(err))
		code = fail(exitError, "%v", err)
	case err := <-hs.done:
		httpReturned++
		log.Error("http", zap.Error(err))
		code = fail(exitError, "%v", err)
	case err := <-restDone:
		restReturned = true
		if err == nil {
			err = errors.New("stopped serving")
		}
		log.Error("rest", zap.Error(err))
		code = fail(exitError, "rest: %v", err)
	}

	sctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.DrainWindow+drainGrace)
	defer cancel()
	r.Shutdown(sctx) // readiness off, GOAWAY, streams ended over the window, upstreams closed
	if !serveReturned {
		if err := <-served; err != nil {
			log.Error("serve", zap.Error(err))
		}
	}
	if !restReturned {
		if err := <-restDone; err != nil {
			log.Error("rest", zap.Error(err))
		}
	}
	hs.shutdown(httpReturned)
	log.Info("stopped")
	return code
}

// configure parses the arguments and the config file. done says the command
// ends here (help, version, validate or an error) with code.
func configure(args []string, stdout io.Writer, fail func(int, string, ...any) int) (o *options, cfg *config.Config, code int, done bool) {
	o, err := parseArgs(args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, nil, exitOK, true
	case err != nil:
		return nil, nil, fail(exitUsage, "%v (see xds-relay --help)", err), true
	case o.version:
		fmt.Fprintf(stdout, "xds-relay %s\n", version)
		return nil, nil, exitOK, true
	}
	cfg, err = o.validConfig()
	if err != nil {
		// One line per problem: every one, the file's and Validate's.
		for _, line := range strings.Split(err.Error(), "\n") {
			fail(exitError, "%s", line)
		}
		return nil, nil, exitError, true
	}
	if o.validate {
		fmt.Fprintln(stdout, "config OK")
		return nil, nil, exitOK, true
	}
	return o, cfg, exitOK, false
}

// logServing says, once, where the relay listens and what it serves.
func logServing(log *zap.Logger, cfg *config.Config, lis *listeners) {
	log.Info("serving",
		zap.String("version", version),
		zap.String("listen", lis.xds.Addr().String()),
		zap.String("admin", addr(lis.admin)),
		zap.String("probe", addr(lis.probe)),
		zap.String("rest", addr(lis.rest)),
		zap.String("node_id", cfg.Node.ID),
		zap.Int("upstream_servers", len(cfg.Upstream.XDSServers)),
		zap.Int("authorities", len(cfg.Upstream.Authorities)))
}

// newLogger builds the process logger writing to w at level (debug, info,
// warn, error) in format (json or console). The returned AtomicLevel changes
// the level at runtime (the admin /debug/loglevel).
func newLogger(level, format string, w io.Writer) (*zap.Logger, zap.AtomicLevel) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		lvl = zapcore.InfoLevel // parseArgs accepts only valid levels
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if format == "console" {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	atom := zap.NewAtomicLevelAt(lvl)
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), atom)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), atom
}

// adminOptions are the admin API's options of cfg: the runtime log level,
// and the token of admin_token_file when set.
func adminOptions(cfg *config.Config, level zap.AtomicLevel) ([]admin.Option, error) {
	opts := []admin.Option{admin.WithLogLevel(level)}
	if cfg.AdminTokenFile != "" {
		tok, err := admin.LoadToken(cfg.AdminTokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, admin.WithToken(tok))
	}
	return opts, nil
}
