package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// running is the command run in the background by startRun, with the
// addresses its "serving" log line names.
type running struct {
	Listen, Admin, Rest, Probe string

	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan int
	once   sync.Once
	code   int // set by stop
}

// startRun runs the command with args until the test ends (as SIGTERM
// does, then expecting exit 0) and returns once it logs "serving".
func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stderr: newSyncBuffer(), cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- run(ctx, args, io.Discard, r.stderr) }()
	t.Cleanup(func() {
		if code := r.stop(); code != exitOK {
			t.Errorf("exit code = %d, want 0; stderr:\n%s", code, r.stderr)
		}
	})
	select {
	case line := <-r.stderr.serving:
		if err := json.Unmarshal(line, r); err != nil {
			t.Fatalf("serving log line %q: %v", line, err)
		}
	case code := <-r.done:
		r.done <- code // for stop
		t.Fatalf("run returned %d before serving; stderr:\n%s", code, r.stderr)
	case <-time.After(10 * time.Second):
		t.Fatalf("no serving log line within 10s; stderr:\n%s", r.stderr)
	}
	return r
}

// stop cancels the run (as SIGTERM does) and returns its exit code, -1
// when it does not return within 10 s. Calling it again returns the same.
func (r *running) stop() int {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.code = <-r.done:
		case <-time.After(10 * time.Second):
			r.code = -1
		}
	})
	return r.code
}

// call sends a request without a body to url and returns the status code
// and the body; a transport error fails the test.
func call(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
