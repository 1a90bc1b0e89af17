package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// progress is one of xds-loadgen's progress lines, which it writes to stderr
// every 5 s when stderr is not a terminal:
//
//	connected 10/10  synced 10/10  updates 0  propagation p50 0s p99 0s  errors 0
type progress struct {
	Connected, Synced, Clients int
	Updates                    int64
	Errors                     int64
	// At is when the line arrived (not part of the line).
	At time.Time
}

var progressRE = regexp.MustCompile(`connected (\d+)/(\d+)\s+synced (\d+)/\d+\s+updates (\d+)\b.*\berrors (\d+)`)

// parseProgress parses a progress line; ok is false for any other line.
func parseProgress(line string) (p progress, ok bool) {
	m := progressRE.FindStringSubmatch(line)
	if m == nil {
		return p, false
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	return progress{
		Connected: int(n(m[1])), Clients: int(n(m[2])), Synced: int(n(m[3])),
		Updates: n(m[4]), Errors: n(m[5]),
	}, true
}

// loadgenSummary is the part of xds-loadgen's --json summary the bench reads.
type loadgenSummary struct {
	Clients       int       `json:"clients"`
	Connections   int       `json:"connections"`
	Synced        int       `json:"synced"`
	Failed        int       `json:"failed"`
	ConnectErrors int64     `json:"connect_errors"`
	StreamErrors  int64     `json:"stream_errors"`
	Responses     int64     `json:"responses"`
	Updates       int64     `json:"updates"`
	NACKs         int64     `json:"nacks_sent"`
	BytesReceived int64     `json:"bytes_received"`
	Propagation   latencies `json:"propagation"`
	// Changes are the propagation of each change apart.
	Changes         []changeLatencies `json:"changes"`
	TimeToSyncAllMS *float64          `json:"time_to_sync_all_ms"`
	RunMS           float64           `json:"run_ms"`
}

// latencies are xds-loadgen's propagation percentiles, in milliseconds.
type latencies struct {
	Samples uint64  `json:"samples"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

// changeLatencies are the latencies of one change, by its creation stamp.
type changeLatencies struct {
	CreatedUnixNano int64 `json:"created_unix_nano"`
	latencies
}

// change returns the latencies of the change stamped created.
func (s *loadgenSummary) change(created int64) (latencies, bool) {
	for _, c := range s.Changes {
		if c.CreatedUnixNano == created {
			return c.latencies, true
		}
	}
	return latencies{}, false
}

// loadgen drives one xds-loadgen process: it follows its progress lines and
// collects its JSON summary when stopped.
type loadgen struct {
	// Set at creation, read-only.
	c      *child
	stdout *bytes.Buffer // written by the child's copier until c.done

	// Guarded by mu.
	mu    sync.Mutex
	last  progress
	seen  bool
	fresh chan struct{} // closed when the next line arrives: every waiter wakes
}

// startLoadgen starts xds-loadgen with args (which must include --json).
func startLoadgen(name, logDir, path string, args []string) (*loadgen, error) {
	l := &loadgen{stdout: &bytes.Buffer{}, fresh: make(chan struct{})}
	c, err := startChild(name, logDir, path, args, childIO{Stdout: l.stdout, OnStderrLine: l.onLine})
	if err != nil {
		return nil, err
	}
	l.c = c
	return l, nil
}

func (l *loadgen) onLine(line string) {
	p, ok := parseProgress(line)
	if !ok {
		return
	}
	p.At = time.Now()
	l.mu.Lock()
	l.last, l.seen = p, true
	close(l.fresh)
	l.fresh = make(chan struct{})
	l.mu.Unlock()
}

// latest returns the last progress line, and whether there was one.
func (l *loadgen) latest() (progress, bool) {
	p, ok, _ := l.current()
	return p, ok
}

// current returns the last progress line, whether there was one, and a
// channel closed at the next.
func (l *loadgen) current() (progress, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.seen, l.fresh
}

// lineSince waits for a progress line that arrived after t.
func (l *loadgen) lineSince(ctx context.Context, t time.Time) (progress, error) {
	return l.waitFor(ctx, "a progress line", func(p progress) bool { return p.At.After(t) })
}

// waitFor waits until a progress line satisfies cond, the process exits or
// ctx is done.
func (l *loadgen) waitFor(ctx context.Context, what string, cond func(progress) bool) (progress, error) {
	for {
		p, ok, fresh := l.current()
		if ok && cond(p) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			p, _ := l.latest()
			return p, fmt.Errorf("bench: loadgen: waiting for %s (last progress %+v): %w", what, p, ctx.Err())
		case <-l.c.done:
			return progress{}, fmt.Errorf("bench: loadgen exited (%v) while waiting for %s:\n%s", l.c.err, what,
				l.c.logTail(2000))
		case <-fresh:
		}
	}
}

// finish interrupts xds-loadgen (it then stops its clients and prints the
// summary) and returns the summary.
func (l *loadgen) finish(timeout time.Duration) (*loadgenSummary, error) {
	err := l.c.stop(syscall.SIGINT, timeout)
	var s loadgenSummary
	out := l.stdout.Bytes() // safe: the child is done
	if jerr := json.Unmarshal(out, &s); jerr != nil {
		if err == nil {
			err = jerr
		}
		return nil, fmt.Errorf("bench: loadgen summary: %w (stdout %q):\n%s", err, truncateString(string(out), 200),
			l.c.logTail(2000))
	}
	// Exit status 1 with a summary means some clients did not sync; the summary says how many.
	return &s, nil
}

// stopQuietly kills the process without collecting a summary (cleanup on errors).
func (l *loadgen) stopQuietly() { _ = l.c.stop(os.Kill, 10*time.Second) }

func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return strings.TrimSpace(s)
}
