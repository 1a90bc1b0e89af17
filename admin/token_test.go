package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
)

// call sends method url with the Authorization header auth ("" for none)
// and returns the status code.
func call(t *testing.T, method, url, auth string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// tokenAdmin serves the admin API of a fake relay with the token of a file
// holding token; it returns the server and the file.
func tokenAdmin(t *testing.T, token string) (*httptest.Server, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.LoadToken(file)
	if err != nil {
		t.Fatalf("LoadToken: %v", err)
	}
	level := zap.NewAtomicLevel()
	srv := httptest.NewServer(admin.Handler(newFake(t, config.Default()), admin.WithLogLevel(level), admin.WithToken(tok)))
	t.Cleanup(srv.Close)
	return srv, file
}

// guardedCalls are the admin calls that need the token when one is set.
var guardedCalls = []struct{ method, path string }{
	{"POST", "/drain"},
	{"DELETE", "/drain"},
	{"GET", "/debug/loglevel"},
	{"PUT", "/debug/loglevel?level=debug"},
	{"GET", "/debug/clients"},
	{"GET", "/debug/cache"},
	{"GET", "/debug/config"},
	{"GET", "/debug/pprof/"},
	{"GET", "/debug/pprof/cmdline"},
}

// With admin_token_file, /drain, the log level, /debug/* and pprof answer
// 401 without the token or with a wrong one, and as usual with it; the
// probes stay open.
func TestAdminToken(t *testing.T) {
	srv, _ := tokenAdmin(t, "s3cret")
	for _, c := range guardedCalls {
		url := srv.URL + c.path
		if got := call(t, c.method, url, ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", c.method, c.path, got)
		}
		if got := call(t, c.method, url, "Bearer wrong"); got != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", c.method, c.path, got)
		}
		if got := call(t, c.method, url, "Basic s3cret"); got != http.StatusUnauthorized {
			t.Errorf("%s %s with another scheme: %d, want 401", c.method, c.path, got)
		}
		if got := call(t, c.method, url, "Bearer s3cret"); got/100 != 2 {
			t.Errorf("%s %s with the token: %d, want 2xx", c.method, c.path, got)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := call(t, "GET", srv.URL+p, ""); got == http.StatusUnauthorized {
			t.Errorf("GET %s without a token: 401, want it open", p)
		}
	}
}

// A changed token file is read again: the old token stops working and the
// new one works.
func TestAdminTokenReread(t *testing.T) {
	srv, file := tokenAdmin(t, "old-token")
	if got := call(t, "GET", srv.URL+"/debug/loglevel", "Bearer old-token"); got != http.StatusOK {
		t.Fatalf("with the token: %d, want 200", got)
	}
	if err := os.WriteFile(file, []byte("a-new-token-of-another-size"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := call(t, "GET", srv.URL+"/debug/loglevel", "Bearer old-token"); got != http.StatusUnauthorized {
		t.Errorf("with the old token after the change: %d, want 401", got)
	}
	if got := call(t, "GET", srv.URL+"/debug/loglevel", "Bearer a-new-token-of-another-size"); got != http.StatusOK {
		t.Errorf("with the new token: %d, want 200", got)
	}
}

// Without a token file every path answers as before (docs/INTERFACE.md).
func TestAdminWithoutTokenOpen(t *testing.T) {
	srv := httptest.NewServer(admin.Handler(newFake(t, config.Default())))
	t.Cleanup(srv.Close)
	for _, c := range guardedCalls {
		if got := call(t, c.method, srv.URL+c.path, ""); got/100 != 2 && got != http.StatusNotImplemented {
			t.Errorf("%s %s without a token configured: %d, want it served", c.method, c.path, got)
		}
	}
}

// An empty or missing token file is an error at start.
func TestLoadTokenRejectsEmpty(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(t.TempDir(), "missing")} {
		if _, err := admin.LoadToken(f); err == nil {
			t.Errorf("LoadToken(%s): no error", f)
		}
	}
}
