package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// newAdmin serves the admin handler of a relay that was built but never
// served, and closes both when the test ends.
func newAdmin(t *testing.T) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:1"}}
	r, err := relay.New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	srv := httptest.NewServer(admin.Handler(r))
	t.Cleanup(func() {
		srv.Close()
		r.Close()
	})
	return srv
}

type answer struct {
	code        int
	contentType string
	body        string
}

func get(t *testing.T, method, url string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(body)}
}

func TestAdminEndpoints(t *testing.T) {
	srv := newAdmin(t)
	defer srv.Client().CloseIdleConnections()
	tests := []struct {
		path         string
		code         int
		contentType  string
		bodyContains string
	}{
		{"/healthz", http.StatusOK, "text/plain; charset=utf-8", "ok"},
		{"/readyz", http.StatusServiceUnavailable, "text/plain; charset=utf-8", "starting: the xDS listener does not serve yet"}, // never served
		{"/metrics", http.StatusOK, "text/plain; version=0.0.4; charset=utf-8; escaping=underscores", "xds_relay_"},
		{"/debug/cache", http.StatusOK, "application/json", "[]"},
		{"/debug/cache?type=Cluster&prefix=a&authority=x", http.StatusOK, "application/json", "[]"},
		{"/debug/clients", http.StatusOK, "application/json", `"streams": []`},
		{"/debug/clients?node=n1&type=Cluster&name=c&limit=5&names=2&after=7", http.StatusOK, "application/json", `"total": 0`},
		{"/debug/clients?limit=0", http.StatusBadRequest, "text/plain; charset=utf-8", `limit="0": want a positive integer`},
		{"/debug/clients?after=x", http.StatusBadRequest, "text/plain; charset=utf-8", `after="x": want a stream id`},
		{"/debug/upstreams", http.StatusOK, "application/json", `"authority": ""`},
		{"/debug/rollouts", http.StatusOK, "application/json", "[]"},
		{"/debug/pprof/", http.StatusOK, "text/html; charset=utf-8", "goroutine"},
		{"/debug/pprof/cmdline", http.StatusOK, "text/plain; charset=utf-8", ""},
		{"/debug/pprof/goroutine?debug=1", http.StatusOK, "text/plain; charset=utf-8", "goroutine profile"},
		{"/", http.StatusOK, "text/plain; charset=utf-8", "/debug/cache"},
		{"/nope", http.StatusNotFound, "text/plain; charset=utf-8", "404"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got := get(t, http.MethodGet, srv.URL+tt.path)
			if got.code != tt.code {
				t.Errorf("status = %d, want %d; body %q", got.code, tt.code, got.body)
			}
			if tt.path != "/metrics" && got.contentType != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got.contentType, tt.contentType)
			}
			if tt.path == "/metrics" && !strings.HasPrefix(got.contentType, "text/plain") {
				t.Errorf("Content-Type = %q, want Prometheus text format", got.contentType)
			}
			if !strings.Contains(got.body, tt.bodyContains) {
				t.Errorf("body %q does not contain %q", got.body, tt.bodyContains)
			}
			if tt.contentType == "application/json" && !json.Valid([]byte(got.body)) {
				t.Errorf("body is not JSON: %q", got.body)
			}
		})
	}
}

func TestAdminJSONIsIndented(t *testing.T) {
	srv := newAdmin(t)
	defer srv.Client().CloseIdleConnections()
	got := get(t, http.MethodGet, srv.URL+"/debug/upstreams")
	if !strings.Contains(got.body, "\n  {") {
		t.Errorf("body is not indented: %q", got.body)
	}
}

func TestAdminMethodNotAllowed(t *testing.T) {
	srv := newAdmin(t)
	defer srv.Client().CloseIdleConnections()
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/debug/cache", "/debug/clients",
			"/debug/upstreams", "/debug/pprof/", "/debug/pprof/symbol"} {
			if method == http.MethodPost && path == "/drain" {
				continue
			}
			if got := get(t, method, srv.URL+path); got.code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d, want 405", method, path, got.code)
			}
		}
	}
	if got := get(t, http.MethodHead, srv.URL+"/healthz"); got.code != http.StatusOK {
		t.Errorf("HEAD /healthz = %d, want 200", got.code)
	}
}

// TestAdminServingRelay checks the debug views and readiness of a relay that
// serves one client.
func TestAdminServingRelay(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	r := xdstest.StartRelay(t, up.Addr())
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "client-1"})
	n := xdstest.NamesFor("svc")
	c.Subscribe(resource.ListenerType, n.Listener)
	c.Ack(c.RecvType(resource.ListenerType))

	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusOK {
		t.Errorf("/readyz while serving = %d, want 200", got.code)
	}

	var cache []relay.CacheEntryInfo
	getJSON(t, srv.URL+"/debug/cache?type=Listener", &cache)
	if len(cache) != 1 || cache[0].Name != n.Listener || cache[0].Type != resource.ListenerType {
		t.Errorf("/debug/cache?type=Listener = %+v, want the one listener %q", cache, n.Listener)
	}
	getJSON(t, srv.URL+"/debug/cache?type=Cluster", &cache)
	if len(cache) != 0 {
		t.Errorf("/debug/cache?type=Cluster = %+v, want none", cache)
	}
	getJSON(t, srv.URL+"/debug/cache?prefix=no-such-name", &cache)
	if len(cache) != 0 {
		t.Errorf("/debug/cache?prefix=no-such-name = %+v, want none", cache)
	}

	var clients relay.ClientPage
	getJSON(t, srv.URL+"/debug/clients?node=client-1", &clients)
	if len(clients.Streams) != 1 || clients.Streams[0].NodeID != "client-1" || clients.Total != 1 {
		t.Errorf("/debug/clients?node=client-1 = %+v, want client-1's stream", clients)
	}
	getJSON(t, srv.URL+"/debug/clients?node=someone-else", &clients)
	if len(clients.Streams) != 0 || clients.Total != 0 {
		t.Errorf("/debug/clients?node=someone-else = %+v, want none", clients)
	}

	var ups []struct{ Authority, Server, State string }
	getJSON(t, srv.URL+"/debug/upstreams", &ups)
	if len(ups) == 0 || ups[0].Server != up.Addr() {
		t.Errorf("/debug/upstreams = %+v, want the upstream %s", ups, up.Addr())
	}

	c.Close()
	r.Close()
	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after Close = %d, want 503", got.code)
	}
}

// POST /drain drains the relay (202) and keeps the admin API up: /readyz
// 503, /metrics 200; a second POST is 202 too. DELETE /drain ends it (200):
// /readyz 200 again; a second DELETE, with nothing to end, is 200 too. Each
// of these calls is logged with the caller's address. What the drain does to
// the streams is relay's TestReversibleDrain.
func TestDrainEndpoint(t *testing.T) {
	up := xdstest.StartUpstream(t)
	obs, logs := observer.New(zap.InfoLevel)
	r := xdstest.StartRelayLogged(t, zap.New(obs), up.Addr(),
		xdstest.WithConfig(func(c *config.Config) { c.Shutdown.DrainWindow = 0 }))
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	xdstest.Eventually(t, r.Ready, "the relay ready", nil)

	if got := get(t, http.MethodPost, srv.URL+"/drain"); got.code != http.StatusAccepted {
		t.Fatalf("POST /drain = %d %q, want 202", got.code, got.body)
	}
	if !r.Draining() {
		t.Error("the relay does not drain after POST /drain")
	}
	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after POST /drain = %d %q, want 503", got.code, got.body)
	}
	if got := get(t, http.MethodGet, srv.URL+"/metrics"); got.code != http.StatusOK {
		t.Errorf("/metrics after POST /drain = %d, want the admin API up", got.code)
	}
	if got := get(t, http.MethodPost, srv.URL+"/drain"); got.code != http.StatusAccepted {
		t.Errorf("second POST /drain = %d, want 202", got.code)
	}

	if got := get(t, http.MethodDelete, srv.URL+"/drain"); got.code != http.StatusOK {
		t.Errorf("DELETE /drain = %d %q, want 200", got.code, got.body)
	}
	if r.Draining() {
		t.Error("the relay drains after DELETE /drain")
	}
	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusOK {
		t.Errorf("/readyz after DELETE /drain = %d %q, want 200", got.code, got.body)
	}
	if got := get(t, http.MethodDelete, srv.URL+"/drain"); got.code != http.StatusOK || !strings.Contains(got.body, "not draining") {
		t.Errorf("DELETE /drain with nothing to end = %d %q, want 200 not draining", got.code, got.body)
	}

	var calls []string
	for _, e := range logs.FilterMessage("admin call").All() {
		f := e.ContextMap()
		if !strings.HasPrefix(fmt.Sprint(f["remote"]), "127.0.0.1:") {
			t.Errorf("admin call logged without the caller's address: %v", f)
		}
		calls = append(calls, fmt.Sprintf("%v %v %v", f["method"], f["path"], f["status"]))
	}
	want := []string{"POST /drain 202", "POST /drain 202", "DELETE /drain 200", "DELETE /drain 200"}
	if strings.Join(calls, ", ") != strings.Join(want, ", ") {
		t.Errorf("logged admin calls %q, want %q (GETs are not logged)", calls, want)
	}
}

// The probe handler serves /healthz, /readyz and /metrics as the admin API
// does, and nothing else: no status page, debug view, pprof or drain.
func TestProbeHandler(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr())
	srv := httptest.NewServer(admin.ProbeHandler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	xdstest.Eventually(t, r.Ready, "the relay ready", nil)

	if got := get(t, http.MethodGet, srv.URL+"/healthz"); got.code != http.StatusOK || got.body != "ok\n" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", got.code, got.body)
	}
	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusOK || !strings.HasPrefix(got.body, "ready") {
		t.Errorf("GET /readyz = %d %q, want 200 ready", got.code, got.body)
	}
	if got := get(t, http.MethodGet, srv.URL+"/metrics"); got.code != http.StatusOK || !strings.Contains(got.body, "xds_relay_ready 1") {
		t.Errorf("GET /metrics = %d, want 200 with xds_relay_ready 1", got.code)
	}
	for _, path := range []string{"/", "/debug/clients", "/debug/config", "/debug/pprof/", "/debug/loglevel", "/drain", "/nope"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if got := get(t, method, srv.URL+path); got.code != http.StatusNotFound {
				t.Errorf("%s %s on the probe port = %d, want 404", method, path, got.code)
			}
		}
	}
	r.StartDrain()
	if got := get(t, http.MethodGet, srv.URL+"/readyz"); got.code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz while drained = %d, want 503", got.code)
	}
}

// /debug/clients is paged and filtered: its answer is bounded whatever the
// fleet, and following "next" visits every stream once.
func TestAdminClientsPaged(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {
		xdstest.EDSCluster("c1", "eds-c1"), xdstest.EDSCluster("c2", "eds-c2"), xdstest.EDSCluster("c3", "eds-c3")}})
	r := xdstest.StartRelay(t, up.Addr())
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	for i := range 5 {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("envoy-%d", i)})
		c.Subscribe(resource.ClusterType, "c1", "c2", "c3")
		c.Ack(c.RecvType(resource.ClusterType))
	}
	other := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "grpc-1"})
	other.Subscribe(resource.ListenerType, "l1")

	// The streams register before their first response: wait for all six.
	var page relay.ClientPage
	xdstest.Eventually(t, func() bool {
		getJSON(t, srv.URL+"/debug/clients", &page)
		return page.Total == 6
	}, "six streams listed", func() any { return page })

	seen := map[string]bool{}
	next := "/debug/clients?node=envoy-*&limit=2&names=1"
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages for 5 streams by 2")
		}
		page = relay.ClientPage{} // "next" is left out on the last page
		getJSON(t, srv.URL+next, &page)
		if page.Total != 5 || len(page.Streams) > 2 {
			t.Fatalf("%s: total %d, %d streams; want 5 in all, at most 2 here", next, page.Total, len(page.Streams))
		}
		for _, s := range page.Streams {
			if seen[s.NodeID] {
				t.Errorf("%s listed twice", s.NodeID)
			}
			seen[s.NodeID] = true
			if names := s.Types[resource.ClusterType].Names; len(names) != 1 || s.NamesTotal[resource.ClusterType] != 3 {
				t.Errorf("%s: names %v, names_total %v; want 1 of 3", s.NodeID, names, s.NamesTotal)
			}
		}
		next = page.Next
	}
	if len(seen) != 5 {
		t.Errorf("pages listed %v, want envoy-0 to envoy-4", seen)
	}
	getJSON(t, srv.URL+"/debug/clients?type=Listener", &page)
	if page.Total != 1 || page.Streams[0].NodeID != "grpc-1" {
		t.Errorf("?type=Listener = %+v, want grpc-1 only", page)
	}
	getJSON(t, srv.URL+"/debug/clients?name=c2", &page)
	if page.Total != 5 {
		t.Errorf("?name=c2: total %d, want the 5 envoys", page.Total)
	}
}

// Every route of admin.Endpoints is served, and the index lists them.
func TestAdminEndpointsListed(t *testing.T) {
	srv := newAdmin(t)
	defer srv.Client().CloseIdleConnections()
	index := get(t, http.MethodGet, srv.URL+"/").body
	for _, e := range admin.Endpoints {
		methods, path, _ := strings.Cut(e.Route, " ")
		path, _, _ = strings.Cut(path, "?")
		if !strings.Contains(index, e.Route) {
			t.Errorf("the index does not list %q", e.Route)
		}
		for _, m := range strings.Split(methods, "|") {
			if m == http.MethodPost || m == http.MethodPut {
				continue // they change things: tested on their own
			}
			if got := get(t, m, srv.URL+path); got.code == http.StatusNotFound || got.code == http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d: not served", m, path, got.code)
			}
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	got := get(t, http.MethodGet, url)
	if got.code != http.StatusOK || got.contentType != "application/json" {
		t.Fatalf("GET %s = %d %q", url, got.code, got.contentType)
	}
	if err := json.Unmarshal([]byte(got.body), v); err != nil {
		t.Fatalf("GET %s: %v in %q", url, err, got.body)
	}
}
