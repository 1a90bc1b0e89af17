package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// --probe-listen serves /healthz, /readyz and /metrics and nothing else;
// the admin port (on loopback) keeps every path.
func TestProbeListen(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := startRun(t, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0",
		"--upstream", up.Addr())
	if r.Probe == "" || r.Probe == r.Admin {
		t.Fatalf("serving line: probe %q, admin %q; want a probe address of its own", r.Probe, r.Admin)
	}
	probe, admin := "http://"+r.Probe, "http://"+r.Admin
	xdstest.Eventually(t, func() bool { code, _ := call(t, http.MethodGet, probe+"/readyz"); return code == http.StatusOK },
		"/readyz 200 on the probe port", nil)
	if code, body := call(t, http.MethodGet, probe+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("probe GET /healthz = %d %q, want 200 ok", code, body)
	}
	if code, body := call(t, http.MethodGet, probe+"/metrics"); code != http.StatusOK ||
		!strings.Contains(body, "xds_relay_upstream_fallback") {
		t.Errorf("probe GET /metrics = %d, want 200 with the relay's metrics", code)
	}
	for _, p := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/debug/clients"}, {"GET", "/debug/pprof/"},
		{"POST", "/drain"}, {"PUT", "/debug/loglevel"}} {
		if code, _ := call(t, p.method, probe+p.path); code != http.StatusNotFound {
			t.Errorf("probe %s %s = %d, want 404", p.method, p.path, code)
		}
	}
	if code, _ := call(t, http.MethodGet, admin+"/debug/clients"); code != http.StatusOK {
		t.Errorf("admin GET /debug/clients = %d, want 200", code)
	}
}
