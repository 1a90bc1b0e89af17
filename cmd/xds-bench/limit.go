package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The limit: plain TCP writes of the same bytes to the same number of
// loopback sockets. A writer process (this program's hidden "tcp-writer"
// command, so that its CPU and memory are measured alone) accepts N
// connections from readers in the bench process, then, on each "write"
// command, writes the SotW CDS response to every connection; the readers
// time from the command to the last reader having every byte.

// limitResult is what the TCP limit measured.
type limitResult struct {
	Conns        int `json:"conns"`
	PayloadBytes int `json:"payload_bytes"`
	// ConnectAll is from the first dial to the writer having accepted all N.
	ConnectAll time.Duration `json:"connect_all"`
	// Rounds are the times from "write" to the last reader done; Median of them.
	Rounds []time.Duration `json:"rounds"`
	Median time.Duration   `json:"median"`
	// WriterCPU is the writer's CPU per round (mean).
	WriterCPU time.Duration `json:"writer_cpu"`
	// Writer RSS while listening, and with N connections accepted.
	WriterRSSBefore uint64 `json:"writer_rss_before"`
	WriterRSSAfter  uint64 `json:"writer_rss_after"`
	// WriterWrite is the writer's wchar growth per round: a check that wchar counts socket writes.
	WriterWrite uint64 `json:"writer_write"`
}

// runLimit measures the TCP limit with conns connections over rounds rounds.
func runLimit(ctx context.Context, e env, self string, conns, rounds int, p payload) (*limitResult, error) {
	res := &limitResult{Conns: conns, PayloadBytes: len(p.SotW)}
	tw, err := startTCPWriter(e, self, conns)
	if err != nil {
		return nil, err
	}
	defer tw.stop()
	addr, err := tw.expect(ctx, "listening ")
	if err != nil {
		return nil, err
	}
	s0, err := sampleProc(tw.c.pid())
	if err != nil {
		return nil, err
	}
	res.WriterRSSBefore = s0.RSS

	e.logf("limit: %d TCP connections to one writer", conns)
	start := time.Now()
	lc, err := dialLimit(ctx, addr, conns)
	if err != nil {
		return nil, err
	}
	defer lc.close()
	if _, err := tw.expect(ctx, "accepted"); err != nil {
		return nil, err
	}
	res.ConnectAll = time.Since(start)
	s1, err := quiesce(ctx, []int{tw.c.pid()}, 300*time.Millisecond, 5*time.Second)
	if err != nil {
		return nil, err
	}
	res.WriterRSSAfter = s1[0].RSS

	if err := measureRounds(ctx, tw, lc, rounds, int64(len(p.SotW)), res); err != nil {
		return nil, err
	}
	_, _ = io.WriteString(tw.stdin, "exit\n")
	return res, nil
}

// tcpWriterProc is the tcp-writer child, driven by lines on its stdin and
// answering with lines on its stdout.
type tcpWriterProc struct {
	c     *child
	stdin *os.File
	lines chan string
}

// startTCPWriter starts the tcp-writer child, which accepts conns
// connections and writes the CDS response of e's clusters.
func startTCPWriter(e env, self string, conns int) (*tcpWriterProc, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	lines := make(chan string, 16)
	c, err := startChild("limit-tcp-writer", e.logDir, self, []string{
		"tcp-writer", "--conns", itoa(conns), "--clusters", itoa(e.clusters),
	}, childIO{Stdin: stdinR, Stdout: &lineWriter{w: io.Discard, fn: func(l string) { lines <- l }}})
	_ = stdinR.Close()
	if err != nil {
		_ = stdinW.Close()
		return nil, err
	}
	return &tcpWriterProc{c: c, stdin: stdinW, lines: lines}, nil
}

// stop kills the writer and closes its stdin.
func (t *tcpWriterProc) stop() {
	_ = t.c.stop(syscall.SIGKILL, 10*time.Second)
	_ = t.stdin.Close()
}

// expect waits for the writer's next line, which must start with prefix,
// and returns the rest of it.
func (t *tcpWriterProc) expect(ctx context.Context, prefix string) (string, error) {
	timer := time.NewTimer(5 * time.Minute)
	defer timer.Stop()
	select {
	case l := <-t.lines:
		if !strings.HasPrefix(l, prefix) {
			return "", fmt.Errorf("bench: tcp-writer said %q, want %q", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
	case <-t.c.done:
		return "", fmt.Errorf("bench: tcp-writer exited (%v):\n%s", t.c.err, t.c.logTail(2000))
	case <-ctx.Done():
		return "", fmt.Errorf("bench: %w", ctx.Err())
	case <-timer.C:
		return "", fmt.Errorf("bench: tcp-writer: no %q within 5m", prefix)
	}
}

// limitConns are the bench side's connections to the writer and the
// goroutines that read the writer's payload from them.
type limitConns struct {
	cs      []net.Conn
	readers sync.WaitGroup
	// done[r] is released once every connection has read round r.
	done []sync.WaitGroup
	errs chan error
}

// dialLimit opens conns connections to addr at once.
func dialLimit(ctx context.Context, addr string, conns int) (*limitConns, error) {
	lc := &limitConns{cs: make([]net.Conn, conns)}
	dialErrs := make(chan error, conns)
	var dials sync.WaitGroup
	var d net.Dialer
	for i := range lc.cs {
		dials.Go(func() {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				dialErrs <- err
				return
			}
			lc.cs[i] = c
		})
	}
	dials.Wait()
	close(dialErrs)
	if err := <-dialErrs; err != nil {
		lc.close()
		return nil, fmt.Errorf("bench: limit dial: %w", err)
	}
	return lc, nil
}

// startReading starts one reader goroutine per connection, which reads size
// bytes in each of total rounds.
func (lc *limitConns) startReading(total int, size int64) {
	lc.done = make([]sync.WaitGroup, total)
	for r := range lc.done {
		lc.done[r].Add(len(lc.cs))
	}
	lc.errs = make(chan error, len(lc.cs))
	for _, c := range lc.cs {
		lc.readers.Go(func() {
			for r := range total {
				if _, err := io.CopyN(io.Discard, c, size); err != nil {
					lc.errs <- err
					// Release the waiters of this and later rounds.
					for ; r < total; r++ {
						lc.done[r].Done()
					}
					return
				}
				lc.done[r].Done()
			}
		})
	}
}

// close closes the connections, which ends the readers, and waits for them.
func (lc *limitConns) close() {
	for _, c := range lc.cs {
		if c != nil {
			_ = c.Close()
		}
	}
	lc.readers.Wait()
}

// measureRounds has the writer write size bytes to every connection in a
// warm-up round and then rounds counted ones, and records their times and
// the writer's CPU and socket writes in res.
func measureRounds(ctx context.Context, tw *tcpWriterProc, lc *limitConns, rounds int, size int64, res *limitResult) error {
	total := rounds + 1 // the first round warms up and is not counted
	lc.startReading(total, size)
	var cpu time.Duration
	for r := range total {
		a, err := sampleProc(tw.c.pid())
		if err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := io.WriteString(tw.stdin, "write\n"); err != nil {
			return fmt.Errorf("bench: tcp-writer: %w", err)
		}
		lc.done[r].Wait()
		took := time.Since(t0)
		if _, err := tw.expect(ctx, "written"); err != nil {
			return err
		}
		b, err := sampleProc(tw.c.pid())
		if err != nil {
			return err
		}
		select {
		case err := <-lc.errs:
			return fmt.Errorf("bench: limit read: %w", err)
		default:
		}
		if r == 0 {
			continue
		}
		res.Rounds = append(res.Rounds, took)
		cpu += b.CPU - a.CPU
		res.WriterWrite = b.Wchr - a.Wchr
	}
	res.WriterCPU = cpu / time.Duration(rounds)
	sorted := slices.Clone(res.Rounds)
	slices.Sort(sorted)
	res.Median = sorted[len(sorted)/2]
	return nil
}

// tcpWriter is the hidden "tcp-writer" command: see runLimit. It speaks on
// stdin/stdout: it prints "listening ADDR", then "accepted" once --conns
// connections are in; on each "write" line it writes the payload to every
// connection and prints "written"; "exit" or EOF ends it.
func tcpWriter(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tcp-writer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conns := fs.Int("conns", 1000, "connections to accept")
	clusters := fs.Int("clusters", 100, "clusters in the CDS response written")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, err := cdsPayload(*clusters)
	if err != nil {
		fmt.Fprintln(stderr, "tcp-writer:", err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "tcp-writer:", err)
		return 1
	}
	defer func() { _ = lis.Close() }()
	fmt.Fprintln(stdout, "listening", lis.Addr())
	cs := make([]net.Conn, 0, *conns)
	defer func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}()
	for len(cs) < *conns {
		c, err := lis.Accept()
		if err != nil {
			fmt.Fprintln(stderr, "tcp-writer: accept:", err)
			return 1
		}
		cs = append(cs, c)
	}
	fmt.Fprintln(stdout, "accepted")
	workers := runtime.GOMAXPROCS(0)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "write":
			if err := writeAll(cs, p.SotW, workers); err != nil {
				fmt.Fprintln(stderr, "tcp-writer:", err)
				return 1
			}
			fmt.Fprintln(stdout, "written")
		case "exit":
			return 0
		}
	}
	return 0
}

// writeAll writes b to every connection, sequentially within each of
// workers goroutines.
func writeAll(cs []net.Conn, b []byte, workers int) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(cs); i += workers {
				if _, err := cs[i].Write(b); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
