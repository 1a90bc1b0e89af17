// Command xds-loadgen simulates many xDS clients (Envoy-like or proxyless-gRPC-
// like, SotW or Delta) against any xDS server and reports sync time, updates and
// end-to-end propagation measured from the creation stamps written by
// xds-democp. Run it with --help for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, terminalWidth(os.Stderr))
	stop()
	os.Exit(code)
}

// terminalWidth returns, when f is a terminal (golang.org/x/term), a
// function that reads its current width (0 when unknown); nil otherwise.
func terminalWidth(f *os.File) func() int {
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return nil
	}
	return func() int {
		w, _, err := term.GetSize(fd)
		if err != nil {
			return 0
		}
		return w
	}
}

// lockedWriter serializes writes from the logger and the progress reporter.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run is main without the process: it returns the exit code. tty is the
// width of stderr's terminal (nil when stderr is not a terminal).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, tty func() int) int {
	stderr = &lockedWriter{w: stderr}
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "xds-loadgen:", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, "xds-loadgen", version)
		return 0
	}
	log, err := fleet.NewConsoleLogger(o.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "xds-loadgen:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	o.cfg.Logger = log
	eng, err := NewEngine(o.cfg)
	if err != nil {
		fmt.Fprintln(stderr, "xds-loadgen:", err)
		return 2
	}

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "xds-loadgen: --cpuprofile:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	progressCtx, stopProgress := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { reportProgress(progressCtx, stderr, tty, o.progressEvery, eng.Progress) })
	sum, err := eng.Run(ctx)
	stopProgress()
	wg.Wait()
	if err != nil {
		fmt.Fprintln(stderr, "xds-loadgen:", err)
		return 1
	}
	if o.json {
		err = sum.WriteJSON(stdout)
	} else {
		err = sum.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "xds-loadgen:", err)
		return 1
	}
	if sum.Losses > 0 && !o.cfg.AllowRemovals {
		fmt.Fprintf(stderr, "xds-loadgen: %d resources lost: clients were told that resources they held are gone "+
			"(see the summary; --allow-removals if the control plane deletes resources)\n", sum.Losses)
		return 1
	}
	if sum.Failed > 0 {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "xds-loadgen: interrupted with %d of %d clients not synced\n", sum.Failed, sum.Clients)
		} else {
			fmt.Fprintf(stderr, "xds-loadgen: %d of %d clients did not sync within %v\n", sum.Failed, sum.Clients, o.cfg.SyncTimeout)
		}
		return 1
	}
	return 0
}

// reportProgress writes a progress line every interval until ctx is done:
// rewritten in place on a terminal (tty gives its width: the line is cut to
// it, a wrapped line could not be redrawn), a plain line otherwise. A zero
// every means every second on a terminal, else every 5 seconds.
func reportProgress(ctx context.Context, w io.Writer, tty func() int, every time.Duration, progress func() Progress) {
	switch {
	case every > 0:
	case tty != nil:
		every = time.Second
	default:
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	width := 0
	for {
		select {
		case <-ctx.Done():
			if tty != nil && width > 0 {
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		line := progress().String()
		if tty == nil {
			fmt.Fprintln(w, line)
			continue
		}
		if cols := tty(); cols > 1 && len(line) >= cols {
			line = line[:cols-1]
		}
		pad := ""
		if len(line) < width {
			pad = strings.Repeat(" ", width-len(line))
		}
		width = len(line)
		fmt.Fprint(w, "\r"+line+pad)
	}
}
