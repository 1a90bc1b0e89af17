package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process started by the bench: one of the programs under test
// or the TCP writer. Its output goes to a log file (and, for stderr, to an
// optional line callback).
type child struct {
	// Set at creation, read-only.
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited and its output is copied

	// Written before done is closed.
	err error
}

// childIO redirects a child's standard streams; zero fields mean: no
// standard input, output to the log file.
type childIO struct {
	// Stdin, when not nil, is the child's standard input.
	Stdin *os.File
	// Stdout, when not nil, receives the child's standard output instead of the log file.
	Stdout io.Writer
	// OnStderrLine, when not nil, is called with each line of standard error (which is logged as well).
	OnStderrLine func(string)
	// Env is added to this program's environment for the child.
	Env []string
}

// startChild starts path with args, its output in logDir/name.log. The child
// is killed if the bench dies.
func startChild(name, logDir, path string, args []string, cio childIO) (*child, error) {
	logf, err := os.Create(logDir + "/" + name + ".log")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(path, args...)
	if len(cio.Env) > 0 {
		cmd.Env = append(os.Environ(), cio.Env...)
	}
	if cio.Stdin != nil {
		cmd.Stdin = cio.Stdin
	}
	cmd.Stdout = logf
	if cio.Stdout != nil {
		cmd.Stdout = cio.Stdout
	}
	cmd.Stderr = logf
	if cio.OnStderrLine != nil {
		cmd.Stderr = &lineWriter{w: logf, fn: cio.OnStderrLine}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	return c, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to timeout for the child to exit, then kills
// it. It returns the exit error (nil for a clean exit).
func (c *child) stop(sig os.Signal, timeout time.Duration) error {
	if !c.exited() {
		_ = c.cmd.Process.Signal(sig)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("bench: %s did not exit within %v of %v; killed", c.name, timeout, sig)
	}
	return c.err
}

// logTail returns the last n bytes of the child's log.
func (c *child) logTail(n int64) string {
	f, err := os.Open(c.log.Name())
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// lineWriter splits what is written into lines for fn, and copies it to w.
type lineWriter struct {
	w   io.Writer
	fn  func(string)
	mu  sync.Mutex
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexAny(l.buf, "\r\n")
		if i < 0 {
			break
		}
		if i > 0 {
			l.fn(string(l.buf[:i]))
		}
		l.buf = l.buf[i+1:]
	}
	return l.w.Write(p)
}

// freePort returns a loopback address with a port that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

// withFreePorts calls start with n loopback addresses whose ports were free
// a moment ago, and again with new ones (three tries in all) when start
// failed because another process bound one first: on a busy machine a port
// is taken between the pick and the child's bind.
func withFreePorts(n int, start func(addrs []string) error) error {
	var err error
	for range 3 {
		addrs := make([]string, n)
		for i := range addrs {
			if addrs[i], err = freePort(); err != nil {
				return err
			}
		}
		if err = start(addrs); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}

// newHTTPClient returns the client for the admin and control endpoints:
// without keep-alive, so that no idle connection shows up in socket counts.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
}

// httpGet fetches url and returns the body; non-200 answers are errors.
func httpGet(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	return httpDo(ctx, hc, http.MethodGet, url)
}

func httpDo(ctx context.Context, hc *http.Client, method, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("bench: %s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// waitHTTP polls url until it answers 200, c exits or ctx is done.
func waitHTTP(ctx context.Context, hc *http.Client, url string, c *child) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := httpGet(rctx, hc, url)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: waiting for %s: %w (last: %v)", url, ctx.Err(), err)
		case <-c.done:
			return fmt.Errorf("bench: %s exited (%v) before %s answered:\n%s", c.name, c.err, url, c.logTail(2000))
		case <-t.C:
		}
	}
}

// quiesce waits until the CPU time of every pid has grown by at most one
// clock tick over quiet, or until max has passed or ctx is done; it returns
// the last samples, in the order of pids.
func quiesce(ctx context.Context, pids []int, quiet, max time.Duration) ([]procSample, error) {
	const every = 50 * time.Millisecond
	first, err := sampleAll(pids)
	if err != nil {
		return nil, err
	}
	window := [][]procSample{first}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return window[len(window)-1], fmt.Errorf("bench: %w", ctx.Err())
		case <-deadline.C:
			return window[len(window)-1], nil
		case <-t.C:
		}
		s, err := sampleAll(pids)
		if err != nil {
			return nil, err
		}
		window = append(window, s)
		for len(window) > 1 && s[0].At.Sub(window[1][0].At) >= quiet {
			window = window[1:]
		}
		if s[0].At.Sub(window[0][0].At) >= quiet && quietSince(window[0], s) {
			return s, nil
		}
	}
}

// quietSince reports whether no process used more than one clock tick of CPU
// between the two samples.
func quietSince(from, to []procSample) bool {
	for i := range from {
		if to[i].CPU-from[i].CPU > clockTick {
			return false
		}
	}
	return true
}

// sampleAll samples every pid.
func sampleAll(pids []int) ([]procSample, error) {
	out := make([]procSample, len(pids))
	for i, pid := range pids {
		s, err := sampleProc(pid)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// sampler records samples of a process at a fixed interval until stopped.
type sampler struct {
	stopc  chan struct{}
	done   chan struct{}
	series []procSample // owned by the sampling goroutine until done is closed
}

// startSampler samples pid every interval.
func startSampler(pid int, every time.Duration) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if p, err := sampleProc(pid); err == nil {
				s.series = append(s.series, p)
			}
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the series.
func (s *sampler) stop() []procSample {
	close(s.stopc)
	<-s.done
	return s.series
}

// writtenBy returns the first sample time at which the bytes written since
// the first sample reached frac of those written by the last one, and
// whether the series had any writes.
func writtenBy(series []procSample, frac float64) (time.Time, bool) {
	if len(series) < 2 {
		return time.Time{}, false
	}
	first, last := series[0].Wchr, series[len(series)-1].Wchr
	if last <= first {
		return time.Time{}, false
	}
	goal := first + uint64(math.Ceil(frac*float64(last-first)))
	for _, s := range series {
		if s.Wchr >= goal {
			return s.At, true
		}
	}
	return series[len(series)-1].At, true
}

// itoa is strconv.Itoa, for argument lists.
func itoa(n int) string { return strconv.Itoa(n) }
