// Command xds-relay is the caching xDS relay: it loads the config (file and
// flags), serves downstream xDS on --listen and the admin HTTP API on --admin,
// and drains on SIGTERM or SIGINT. See `xds-relay --help` and docs/INTERFACE.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zapgrpc"
	"google.golang.org/grpc/grpclog"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/relay"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// drainGrace is how long after shutdown.drain_window the drain may last
// before the remaining streams are closed (docs/INTERFACE.md: the relay exits
// within the window plus 2 s; the rest of the second goes to closing the
// upstreams, the warm-restart file and the admin server).
const drainGrace = time.Second

func main() {
	relay.Version = version
	if os.Getenv("GOGC") == "" {
		// A relay's memory is mostly long-lived stream state and its work
		// comes in bursts (connection storms, fan-outs): collect when the heap
		// has grown by half instead of doubled, for a lower steady RSS per
		// client at a small CPU cost. GOGC in the environment overrides it.
		debug.SetGCPercent(50)
	}
	if o, err := parseArgs(os.Args[1:], io.Discard); err == nil {
		// grpc's own warnings and errors (a certificate file that no longer
		// loads, a transport failure) go to the same log, as JSON. grpc's
		// logger is process-wide and set once, before grpc starts.
		log, _ := newLogger(o.logLevel, o.logFormat, os.Stderr)
		grpclog.SetLoggerV2(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// After the first signal, a second one kills the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
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
	o, err := parseArgs(args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return fail(exitUsage, "%v (see xds-relay --help)", err)
	case o.version:
		fmt.Fprintf(stdout, "xds-relay %s\n", version)
		return exitOK
	}
	cfg, err := o.config()
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		// One line per problem (Validate reports every one).
		for _, line := range strings.Split(err.Error(), "\n") {
			fail(exitError, "%s", line)
		}
		return exitError
	}
	if o.validate {
		fmt.Fprintln(stdout, "config OK")
		return exitOK
	}

	log, level := newLogger(o.logLevel, o.logFormat, stderr)
	defer func() { _ = log.Sync() }()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	var adminLis net.Listener
	if cfg.Admin != "" {
		if adminLis, err = net.Listen("tcp", cfg.Admin); err != nil {
			_ = lis.Close()
			return fail(exitError, "admin: %v", err)
		}
	}
	var restLis net.Listener
	if cfg.REST != nil {
		if restLis, err = net.Listen("tcp", cfg.REST.Listen); err != nil {
			_ = lis.Close()
			if adminLis != nil {
				_ = adminLis.Close()
			}
			return fail(exitError, "rest: %v", err)
		}
	}
	r, err := relay.New(cfg, log)
	if err != nil {
		for _, l := range []net.Listener{lis, adminLis, restLis} {
			if l != nil {
				_ = l.Close()
			}
		}
		return fail(exitError, "%v", err)
	}

	served := make(chan error, 1)
	go func() { served <- r.Serve(lis) }()

	var adminHTTP *http.Server
	adminDone := make(chan error, 1)
	adminAddr := ""
	if adminLis != nil {
		adminAddr = adminLis.Addr().String()
		adminHTTP = &http.Server{
			Handler:           admin.Handler(r, admin.WithLogLevel(level)),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("admin")),
		}
		go func() { adminDone <- adminHTTP.Serve(adminLis) }()
	}
	restDone := make(chan error, 1)
	restAddr := ""
	if restLis != nil {
		restAddr = restLis.Addr().String()
		go func() { restDone <- r.ServeREST(restLis) }()
	}
	log.Info("serving",
		zap.String("version", version),
		zap.String("listen", lis.Addr().String()),
		zap.String("admin", adminAddr),
		zap.String("rest", restAddr),
		zap.Int("upstream_servers", len(cfg.Upstream.XDSServers)),
		zap.Int("authorities", len(cfg.Upstream.Authorities)))

	// Wait for a signal, or for Serve or the admin server to fail. Serve
	// returns nil after POST /drain: the relay then waits for the signal.
	code := exitOK
	serveReturned, adminReturned := false, false
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			log.Info("shutting down: draining", zap.Duration("drain_window", cfg.Shutdown.DrainWindow))
			waiting = false
		case err := <-served:
			serveReturned = true
			if err == nil && r.Draining() {
				log.Info("drained on the admin API: no xDS served; waiting for SIGTERM")
				served = nil // a nil channel is never ready
				continue
			}
			// Serve returns only after Shutdown or Close; anything else is fatal.
			if err == nil {
				err = errors.New("relay stopped serving")
			}
			log.Error("serve", zap.Error(err))
			code = fail(exitError, "%v", err)
			waiting = false
		case err := <-adminDone:
			adminReturned = true
			log.Error("admin", zap.Error(err))
			code = fail(exitError, "admin: %v", err)
			waiting = false
		case err := <-restDone:
			restLis = nil
			if err == nil && r.Draining() {
				restDone = nil // POST /drain closed it too
				continue
			}
			if err == nil {
				err = errors.New("stopped serving")
			}
			log.Error("rest", zap.Error(err))
			code = fail(exitError, "rest: %v", err)
			waiting = false
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.DrainWindow+drainGrace)
	defer cancel()
	r.Shutdown(sctx) // readiness off, GOAWAY, streams ended over the window, upstreams closed
	if !serveReturned {
		if err := <-served; err != nil {
			log.Error("serve", zap.Error(err))
		}
	}
	if restLis != nil {
		if err := <-restDone; err != nil {
			log.Error("rest", zap.Error(err))
		}
	}
	if adminHTTP != nil && !adminReturned {
		actx, acancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer acancel()
		if err := adminHTTP.Shutdown(actx); err != nil {
			log.Warn("admin shutdown", zap.Error(err))
			_ = adminHTTP.Close()
		}
		if err := <-adminDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin", zap.Error(err))
		}
	}
	log.Info("stopped")
	return code
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
