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
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() { _ = stdinW.Close() }()
	lines := make(chan string, 16)
	w, err := startChild("limit-tcp-writer", e.logDir, self, []string{
		"tcp-writer", "--conns", itoa(conns), "--clusters", itoa(e.clusters),
	}, childIO{Stdin: stdinR, Stdout: &lineWriter{w: io.Discard, fn: func(l string) { lines <- l }}})
	_ = stdinR.Close()
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.stop(syscall.SIGKILL, 10*time.Second) }()
	expect := func(prefix string) (string, error) {
		t := time.NewTimer(5 * time.Minute)
		defer t.Stop()
		select {
		case l := <-lines:
			if !strings.HasPrefix(l, prefix) {
				return "", fmt.Errorf("bench: tcp-writer said %q, want %q", l, prefix)
			}
			return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
		case <-w.done:
			return "", fmt.Errorf("bench: tcp-writer exited (%v):\n%s", w.err, w.logTail(2000))
		case <-ctx.Done():
			return "", fmt.Errorf("bench: %w", ctx.Err())
		case <-t.C:
			return "", fmt.Errorf("bench: tcp-writer: no %q within 5m", prefix)
		}
	}
	addr, err := expect("listening ")
	if err != nil {
		return nil, err
	}
	s0, err := sampleProc(w.pid())
	if err != nil {
		return nil, err
	}
	res.WriterRSSBefore = s0.RSS

	e.logf("limit: %d TCP connections to one writer", conns)
	start := time.Now()
	cs := make([]net.Conn, conns)
	dialErrs := make(chan error, conns)
	var dials sync.WaitGroup
	var d net.Dialer
	for i := range cs {
		dials.Go(func() {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				dialErrs <- err
				return
			}
			cs[i] = c
		})
	}
	dials.Wait()
	close(dialErrs)
	var readers sync.WaitGroup
	defer func() {
		// Closing the connections ends the readers.
		for _, c := range cs {
			if c != nil {
				_ = c.Close()
			}
		}
		readers.Wait()
	}()
	if err := <-dialErrs; err != nil {
		return nil, fmt.Errorf("bench: limit dial: %w", err)
	}
	if _, err := expect("accepted"); err != nil {
		return nil, err
	}
	res.ConnectAll = time.Since(start)
	s1, err := quiesce(ctx, []int{w.pid()}, 300*time.Millisecond, 5*time.Second)
	if err != nil {
		return nil, err
	}
	res.WriterRSSAfter = s1[0].RSS

	// One reader goroutine per connection, through every round.
	size := int64(len(p.SotW))
	total := rounds + 1 // the first round warms up and is not counted
	done := make([]sync.WaitGroup, total)
	for r := range done {
		done[r].Add(conns)
	}
	readErrs := make(chan error, conns)
	for _, c := range cs {
		readers.Go(func() {
			for r := range total {
				if _, err := io.CopyN(io.Discard, c, size); err != nil {
					readErrs <- err
					// Release the waiters of this and later rounds.
					for ; r < total; r++ {
						done[r].Done()
					}
					return
				}
				done[r].Done()
			}
		})
	}
	var cpu time.Duration
	for r := range total {
		a, err := sampleProc(w.pid())
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := io.WriteString(stdinW, "write\n"); err != nil {
			return nil, fmt.Errorf("bench: tcp-writer: %w", err)
		}
		done[r].Wait()
		took := time.Since(t0)
		if _, err := expect("written"); err != nil {
			return nil, err
		}
		b, err := sampleProc(w.pid())
		if err != nil {
			return nil, err
		}
		select {
		case err := <-readErrs:
			return nil, fmt.Errorf("bench: limit read: %w", err)
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
	_, _ = io.WriteString(stdinW, "exit\n")
	return res, nil
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
