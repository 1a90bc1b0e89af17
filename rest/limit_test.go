package rest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// silentSource binds and watches without ever notifying: every poll holds.
type silentSource struct{}

func (silentSource) Bind(downstream.Watcher, *corev3.Node) error         { return nil }
func (silentSource) Watch(downstream.Watcher, string, downstream.Change) {}
func (silentSource) Cancel(downstream.Watcher)                           {}

// Polls beyond MaxPolls are refused 429 with Retry-After while the others
// stay held.
func TestPollLimit(t *testing.T) {
	var next uint64
	var idMu sync.Mutex
	srv := New(silentSource{}, Options{MaxPolls: 2, PollTimeout: time.Minute, NewID: func() uint64 {
		idMu.Lock()
		defer idMu.Unlock()
		next++
		return next
	}})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	defer srv.Close()
	post := func() *http.Response {
		res, err := http.Post(ts.URL+"/v3/discovery:clusters", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Error(err)
			return nil
		}
		return res
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if res := post(); res != nil {
				res.Body.Close()
				if res.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("held poll at Close: %d, want 503", res.StatusCode)
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(srv.Polls()) < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("the two polls were not held")
		case <-tick.C:
		}
	}
	res := post()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" ||
		!strings.Contains(b.String(), "2 REST polls held, the limit") {
		t.Fatalf("poll over the limit: %d %q (Retry-After %q)", res.StatusCode, b.String(), res.Header.Get("Retry-After"))
	}
	if n := len(srv.Polls()); n != 2 {
		t.Fatalf("%d polls held, want 2", n)
	}
	srv.Close()
	wg.Wait()
}

// decodeRequest never panics, and what it accepts is a request of the
// endpoint's type within the name limit.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"node": {"id": "n"}, "resource_names": ["a", "b"]}`, `{"type_url": "x"}`,
		`{"error_detail": {"code": 3, "message": "m", "details": [{"@type": "type.googleapis.com/google.protobuf.Empty"}]}}`,
		`{"resource_locators": [{"name": "a", "dynamic_parameters": {"k": "v"}}]}`, `{"resource_names": ["\u0000"]}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body, keying.ClusterType, 4)
		if err != nil {
			if _, ok := err.(*httpError); !ok {
				t.Fatalf("error %T is not an httpError", err)
			}
			return
		}
		if req.GetTypeUrl() != keying.ClusterType || len(req.GetResourceNames()) > 4 || len(req.GetResourceLocators()) > 0 {
			t.Fatalf("accepted %v", req)
		}
	})
}
