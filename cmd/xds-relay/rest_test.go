package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// --rest-listen serves REST-JSON polling; a poll held at shutdown is
// answered 503 at once and does not hold the exit up.
func TestRESTListen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := newSyncBuffer()
	var stdout bytes.Buffer
	done := make(chan int, 1)
	go func() {
		// The upstream is unreachable: a wildcard poll is held (nothing known).
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "", "--rest-listen", "127.0.0.1:0",
			"--upstream", "127.0.0.1:1"}, &stdout, stderr)
	}()
	wait, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	var line []byte
	select {
	case line = <-stderr.serving:
	case code := <-done:
		t.Fatalf("run returned %d before serving; stderr:\n%s", code, stderr)
	case <-wait.Done():
		t.Fatalf("no serving log line within 10s; stderr:\n%s", stderr)
	}
	var serving struct{ Rest string }
	if err := json.Unmarshal(line, &serving); err != nil || serving.Rest == "" {
		t.Fatalf("serving log line %q: no rest address (%v)", line, err)
	}
	url := "http://" + serving.Rest + "/v3/discovery:clusters"
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET %s = %d, want 405", url, res.StatusCode)
	}
	polled := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(wait, http.MethodPost, url, strings.NewReader(`{"node": {"id": "envoy-1"}}`))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		polled <- res.StatusCode
	}()
	select {
	case code := <-polled:
		t.Fatalf("poll answered %d before shutdown, want it held", code)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	for _, ch := range []chan int{polled, done} {
		select {
		case code := <-ch:
			if ch == polled && code != http.StatusServiceUnavailable {
				t.Errorf("held poll at shutdown: %d, want 503", code)
			}
			if ch == done && code != exitOK {
				t.Errorf("exit code %d; stderr:\n%s", code, stderr)
			}
		case <-wait.Done():
			t.Fatalf("no answer within 10s of cancel; stderr:\n%s", stderr)
		}
	}
}
