package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/upstream"
)

// statusAdmin serves the admin handler (with opts) of a fake idle relay of
// cfg (newFake); it is closed when the test ends.
func statusAdmin(t *testing.T, cfg *config.Config, opts ...admin.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(admin.Handler(newFake(t, cfg), opts...))
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
	})
	return srv
}

func statusConfig() *config.Config {
	cfg := config.Default()
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: "127.0.0.1:1"}}
	return cfg
}

type statusAnswer struct {
	code   int
	header http.Header
	body   string
}

// do sends one request with a 10 s timeout; body, when set, is sent with
// contentType.
func do(t *testing.T, method, u string, header map[string]string, body string) statusAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, u, err)
	}
	return statusAnswer{resp.StatusCode, resp.Header, string(b)}
}

func TestStatusPageNegotiation(t *testing.T) {
	srv := statusAdmin(t, statusConfig())
	browser := map[string]string{"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}

	html := do(t, http.MethodGet, srv.URL+"/", browser, "")
	if html.code != http.StatusOK || html.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / (browser) = %d %q", html.code, html.header.Get("Content-Type"))
	}
	for _, want := range []string{"<title>xds-relay status</title>", `id="fleet-streams">0<`, `id="ready" class="bad">not ready`,
		`data-server="127.0.0.1:1"`, `id="prop-count">0<`, `href="/debug/config"`} {
		if !strings.Contains(html.body, want) {
			t.Errorf("status page lacks %q:\n%s", want, html.body)
		}
	}
	if csp := html.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q, want default-src 'none'", csp)
	}
	for _, external := range []string{"<script", "<link", "http://", "https://", "src="} {
		if strings.Contains(html.body, external) {
			t.Errorf("status page is not self-contained: has %q", external)
		}
	}
	if got := do(t, http.MethodGet, srv.URL+"/?format=html", nil, ""); !strings.Contains(got.body, "<!DOCTYPE html>") {
		t.Errorf("GET /?format=html is not the page: %q", got.body)
	}

	text := do(t, http.MethodGet, srv.URL+"/", nil, "")
	if text.code != http.StatusOK || !strings.HasPrefix(text.header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(text.body, "/debug/config") || !strings.Contains(text.body, "/debug/loglevel") {
		t.Errorf("GET / (no Accept) = %d %q %q, want the text index", text.code, text.header.Get("Content-Type"), text.body)
	}

	var o admin.Overview
	js := do(t, http.MethodGet, srv.URL+"/?format=json", nil, "")
	if err := json.Unmarshal([]byte(js.body), &o); err != nil {
		t.Fatalf("GET /?format=json: %v in %q", err, js.body)
	}
	if o.Ready || o.Fleet.Streams != 0 || len(o.Upstreams) != 1 || o.Upstreams[0].Server != "127.0.0.1:1" {
		t.Errorf("overview of an idle relay = %+v", o)
	}
	for _, path := range []string{"/", "/debug/config"} {
		if got := do(t, http.MethodPost, srv.URL+path, nil, ""); got.code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s = %d, want 405", path, got.code)
		}
	}
}

// waitOverview polls admin.OverviewOf(r) until cond holds, for at most 10 s.
func waitOverview(t *testing.T, r *xdstest.Relay, what string, cond func(admin.Overview) bool) admin.Overview {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		o := admin.OverviewOf(r.Relay)
		if cond(o) {
			return o
		}
		select {
		case <-ctx.Done():
			t.Fatalf("overview: %s: not within 10s; last %+v", what, o)
		case <-tick.C:
		}
	}
}

func TestOverviewServingRelay(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	r := xdstest.StartRelay(t, up.Addr())
	n := xdstest.NamesFor("svc")

	good := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "good"})
	good.Subscribe(resource.ListenerType, n.Listener)
	good.Ack(good.RecvType(resource.ListenerType))

	bad := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "bad"})
	bad.Subscribe(resource.ClusterType, n.Cluster)
	bad.Nack(bad.RecvType(resource.ClusterType), "cluster rejected: <b>bad</b>")

	delta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "delta"})
	delta.Subscribe(resource.ClusterType, []string{n.Cluster}, nil)
	delta.Ack(delta.MustRecv())

	wantTypes := map[string]admin.TypeStreams{
		resource.ListenerType: {Type: resource.ListenerType, SotW: 1, Current: 1},
		resource.ClusterType:  {Type: resource.ClusterType, SotW: 1, Delta: 1, Current: 1, NACKing: 1},
	}
	byType := func(o admin.Overview) bool {
		for _, ts := range o.Fleet.ByType {
			if ts != wantTypes[ts.Type] {
				return false
			}
		}
		return len(o.Fleet.ByType) == len(wantTypes)
	}
	// The ACKs are counted when the relay reads them: wait for them all.
	o := waitOverview(t, r, "3 streams, 2 ACKs, 1 NACK, each type's sync", func(o admin.Overview) bool {
		return o.Fleet.Streams == 3 && o.NACKsTotal == 1 && o.Counters["xds_relay_acks_total"] >= 2 &&
			o.Propagation.Count >= 1 && byType(o)
	})
	if !o.Ready || o.Fleet.Nodes != 3 || o.Fleet.ByProtocol["sotw"] != 2 || o.Fleet.ByProtocol["delta"] != 1 ||
		o.Fleet.ByService["ads"] != 3 {
		t.Errorf("fleet = %+v (ready %v)", o.Fleet, o.Ready)
	}

	if len(o.Upstreams) != 1 || !o.Upstreams[0].Current || !o.Upstreams[0].Connected ||
		o.Upstreams[0].State != "connected" || o.Upstreams[0].Server != up.Addr() || o.Upstreams[0].Subscribed != 2 {
		t.Errorf("upstreams = %+v, want %s connected with 2 names", o.Upstreams, up.Addr())
	}

	got := map[string]admin.CacheTypeSummary{}
	for _, c := range o.Cache {
		got[c.Type] = c
	}
	for _, typ := range []string{resource.ListenerType, resource.ClusterType} {
		entries := r.DebugCache(relay.CacheFilter{Type: typ})
		if len(entries) != 1 || got[typ].Resources != 1 || got[typ].Watched != 1 || got[typ].Bytes != entries[0].Bytes {
			t.Errorf("cache %s = %+v, want 1 watched resource of %d bytes", typ, got[typ], entries[0].Bytes)
		}
	}

	if len(o.NACKs) != 1 || !reflect.DeepEqual(o.NACKs[0].Nodes, []string{"bad"}) || o.NACKs[0].Streams != 1 ||
		o.NACKs[0].Type != resource.ClusterType || o.NACKs[0].Message != "cluster rejected: <b>bad</b>" ||
		o.NACKs[0].Version == "" || o.NACKGroups != 1 {
		t.Errorf("NACKs = %+v", o.NACKs)
	}
	if o.Serving.State != admin.ServingReady || o.Serving.Class != "ok" || !o.Serving.Synced {
		t.Errorf("serving = %+v, want ready", o.Serving)
	}
	if o.Counters["xds_relay_nacks_total"] != 1 || o.Counters["xds_relay_acks_total"] < 2 {
		t.Errorf("counters = %v", o.Counters)
	}
	var sum uint64
	for _, b := range o.Propagation.Buckets {
		sum += b.Count
	}
	if sum+o.Propagation.Overflow != o.Propagation.Count || o.Propagation.P50 <= 0 {
		t.Errorf("propagation = %+v", o.Propagation)
	}

	// The page escapes what clients send.
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
	if strings.Contains(page, "<b>bad</b>") || !strings.Contains(page, "cluster rejected: &lt;b&gt;bad&lt;/b&gt;") {
		t.Errorf("NACK message not escaped in the page")
	}
}

// The overview and the page of a fake relay: the rows of every configured
// server (the current one with the client's state, the others standby), the
// per-server metrics, the fleet, the NACKs escaped, the cache summed by type
// and the propagation histogram.
func TestStatusPageOfFake(t *testing.T) {
	cfg := statusConfig()
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: "a.example:1"}, {ServerURI: "b.example:2"}}
	cfg.Upstream.Authorities = map[string]config.Authority{"auth.example": {XDSServers: []config.Server{{ServerURI: "c.example:3"}}}}
	f := newFake(t, cfg)
	f.ready, f.reason = true, "ready: serving, synced with an upstream"
	f.ups = []relay.UpstreamInfo{
		{Authority: "", Server: "b.example:2", State: "connected", LastError: "a.example:1: refused",
			Types: []upstream.TypeStatus{{TypeURL: resource.ClusterType, Names: []string{"c1", "c2"}}, {TypeURL: resource.ListenerType, Wildcard: true}}},
		{Authority: "auth.example", State: "idle"},
	}
	f.clients = []relay.ClientInfo{
		{ID: 1, NodeID: "envoy-1", Protocol: "sotw", Service: "ads", Types: map[string]downstream.TypeInfo{
			resource.ClusterType: {SentVersion: "v2", AckedVersion: "v1", LastNACK: "cluster <b>bad</b>"}}},
		{ID: 2, NodeID: "grpc-1", Protocol: "delta", Service: "ads", Types: map[string]downstream.TypeInfo{
			resource.ClusterType: {}, resource.ListenerType: {}}},
	}
	f.cache = []relay.CacheEntryInfo{
		{Type: resource.ClusterType, Name: "c1", Bytes: 100, Subscribers: 2},
		{Type: resource.ClusterType, Name: "c2", Bytes: 50},
		{Type: resource.ListenerType, Name: "l1", Bytes: 2048, Subscribers: 1},
	}
	connected := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xds_relay_upstream_connected"}, []string{"authority", "server"})
	connected.WithLabelValues("", "b.example:2").Set(1)
	reconnects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xds_relay_upstream_reconnects_total"}, []string{"authority", "server"})
	reconnects.WithLabelValues("", "a.example:1").Add(4)
	nacks := prometheus.NewCounter(prometheus.CounterOpts{Name: "xds_relay_nacks_total"})
	nacks.Add(3)
	prop := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xds_relay_propagation_seconds", Buckets: []float64{0.001, 0.01}})
	for _, v := range []float64{0.0005, 0.005, 0.005, 0.5} {
		prop.Observe(v)
	}
	f.reg.MustRegister(connected, reconnects, nacks, prop)

	o := admin.OverviewOf(f)
	wantUps := []admin.UpstreamOverview{
		{Server: "a.example:1", State: "standby", Reconnects: 4},
		{Server: "b.example:2", Current: true, Fallback: true, State: "connected", Connected: true,
			LastError: "a.example:1: refused", Subscribed: 3},
		{Authority: "auth.example", Server: "c.example:3", Current: true, State: "idle"},
	}
	if !reflect.DeepEqual(o.Upstreams, wantUps) {
		t.Errorf("upstreams = %+v, want %+v", o.Upstreams, wantUps)
	}
	if !o.Ready || o.Version != relay.Version || o.Fleet.Streams != 2 || o.Fleet.Nodes != 2 ||
		o.Fleet.ByProtocol["sotw"] != 1 || o.Fleet.ByProtocol["delta"] != 1 || o.Fleet.ByService["ads"] != 2 {
		t.Errorf("overview = %+v", o)
	}
	wantTypes := []admin.TypeStreams{{Type: resource.ClusterType, SotW: 1, Delta: 1}, {Type: resource.ListenerType, Delta: 1}}
	if !reflect.DeepEqual(o.Fleet.ByType, wantTypes) {
		t.Errorf("fleet by type = %+v, want %+v", o.Fleet.ByType, wantTypes)
	}
	wantCache := []admin.CacheTypeSummary{{Type: resource.ClusterType, Resources: 2, Watched: 1, Bytes: 150},
		{Type: resource.ListenerType, Resources: 1, Watched: 1, Bytes: 2048}}
	if !reflect.DeepEqual(o.Cache, wantCache) {
		t.Errorf("cache = %+v, want %+v", o.Cache, wantCache)
	}
	wantNACKs := []admin.NACKGroup{{Type: resource.ClusterType, Version: "v2", Message: "cluster <b>bad</b>", Streams: 1,
		Nodes: []string{"envoy-1"}}}
	if o.NACKsTotal != 1 || !reflect.DeepEqual(o.NACKs, wantNACKs) {
		t.Errorf("NACKs = %+v (total %d)", o.NACKs, o.NACKsTotal)
	}
	// The first server is unreachable: ready, but not green.
	wantServing := admin.ServingOverview{State: admin.ServingFallback, Class: "warn",
		Headline: "serving from a fallback server for (default): the first server of the list is unreachable",
		Reason:   f.reason, Synced: true, Down: []string{}, OnFallback: []string{""}}
	if !reflect.DeepEqual(o.Serving, wantServing) {
		t.Errorf("serving = %+v, want %+v", o.Serving, wantServing)
	}
	if o.Counters["xds_relay_nacks_total"] != 3 || o.Counters["xds_relay_upstream_reconnects_total"] != 4 {
		t.Errorf("counters = %v", o.Counters)
	}
	wantBuckets := []admin.HistogramBucket{{UpperBound: 0.001, Count: 1}, {UpperBound: 0.01, Count: 2}}
	if p := o.Propagation; p.Count != 4 || p.Overflow != 1 || !reflect.DeepEqual(p.Buckets, wantBuckets) || p.P50 != p.Quantile(0.5) {
		t.Errorf("propagation = %+v", p)
	}

	srv := httptest.NewServer(admin.Handler(f))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	page := do(t, http.MethodGet, srv.URL+"/?format=html", nil, "").body
	for _, want := range []string{`data-state="fallback" id="ready" class="warn">serving from a fallback server`, `id="fleet-streams">2<`, `id="nacks-current">1<`,
		`id="nacks-total">3<`, `data-server="a.example:1"`, `data-authority="auth.example" data-server="c.example:3"`,
		`cluster &lt;b&gt;bad&lt;/b&gt;`, `data-bytes="2048">2.0 KiB<`, `id="prop-count">4<`,
		`class="state warn">connected (fallback: the first server is unreachable)<`} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if strings.Contains(page, "<b>bad</b>") {
		t.Errorf("NACK message not escaped in the page")
	}
}

func TestPropagationQuantile(t *testing.T) {
	p := admin.PropagationOverview{
		Count:   10,
		Buckets: []admin.HistogramBucket{{UpperBound: 0.001, Count: 0}, {UpperBound: 0.002, Count: 5}, {UpperBound: 0.004, Count: 4}},
		// one observation above 4ms
		Overflow: 1,
	}
	tests := []struct{ q, want float64 }{
		{0.5, 0.002},    // rank 5: the end of the (1ms, 2ms] bucket
		{0.1, 0.0012},   // rank 1 of 5 in (1ms, 2ms]
		{0.7, 0.003},    // rank 7: 2 of 4 in (2ms, 4ms]
		{0.99, 0.004},   // above the last bound: the last bound
		{0.95, 0.004},   // rank 9.5 > 9
		{0.05, 0.00110}, // rank 0.5 of 5
	}
	for _, tt := range tests {
		if got := p.Quantile(tt.q); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (admin.PropagationOverview{}).Quantile(0.5); got != 0 {
		t.Errorf("Quantile of nothing = %v, want 0", got)
	}
}

func TestDebugConfigRedactsSecrets(t *testing.T) {
	// Parsed from YAML, as the relay loads it.
	cfg, err := config.Parse([]byte(`
node:
  id: relay-1
  metadata:
    env: prod
    api_token: tok-SECRET-1
    blob: |
      -----BEGIN CERTIFICATE-----
      MIIB-SECRET-2
      -----END CERTIFICATE-----
upstream:
  xds_servers:
    - server_uri: 127.0.0.1:1
  authorities:
    auth.example:
      xds_servers:
        - server_uri: 127.0.0.1:2
          channel_creds:
            - type: tls
              config:
                ca_certificate_file: /etc/xds-relay/ca.pem
                certificate_file: /etc/xds-relay/relay.pem
                private_key_file: /etc/xds-relay/relay-key.pem
                private_key: SECRET-3
                refresh_interval: SECRET-4   # not a path: channel_creds config values are redacted
                nested: {certificate_file: SECRET-5}
tls:
  cert_file: /etc/xds-relay/server.pem
  key_file: /etc/xds-relay/server-key.pem
`))
	if err != nil {
		t.Fatal(err)
	}
	red, err := admin.RedactConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(red, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	body := string(out)
	if strings.Contains(body, "SECRET") || strings.Contains(body, "BEGIN") {
		t.Errorf("secret in the redacted config:\n%s", body)
	}
	for _, want := range []string{"/etc/xds-relay/ca.pem", "/etc/xds-relay/relay.pem", "/etc/xds-relay/relay-key.pem",
		"/etc/xds-relay/server.pem", "/etc/xds-relay/server-key.pem", `"env": "prod"`, `"id": "relay-1"`, admin.Redacted} {
		if !strings.Contains(body, want) {
			t.Errorf("the redacted config lacks %q:\n%s", want, body)
		}
	}
}

func TestDebugConfigServed(t *testing.T) {
	srv := statusAdmin(t, statusConfig())
	got := do(t, http.MethodGet, srv.URL+"/debug/config", nil, "")
	if got.code != http.StatusOK || got.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /debug/config = %d %q", got.code, got.header.Get("Content-Type"))
	}
	var m struct {
		Listen   string `json:"listen"`
		Upstream struct {
			Linger     string `json:"linger"`
			XDSServers []struct {
				ServerURI string `json:"server_uri"`
			} `json:"xds_servers"`
		} `json:"upstream"`
		Cache struct {
			MaxUnreferenced int `json:"max_unreferenced"`
		} `json:"cache"`
	}
	if err := json.Unmarshal([]byte(got.body), &m); err != nil {
		t.Fatal(err)
	}
	if m.Listen != config.DefaultListen || m.Upstream.Linger != "5s" || len(m.Upstream.XDSServers) != 1 ||
		m.Upstream.XDSServers[0].ServerURI != "127.0.0.1:1" || m.Cache.MaxUnreferenced != config.DefaultMaxUnreferenced {
		t.Errorf("/debug/config = %+v", m)
	}
}

func TestDebugLogLevel(t *testing.T) {
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	srv := statusAdmin(t, statusConfig(), admin.WithLogLevel(level))
	u := srv.URL + "/debug/loglevel"

	type answer struct {
		Level    string `json:"level"`
		Previous string `json:"previous"`
		Settable bool   `json:"settable"`
	}
	decode := func(a statusAnswer) answer {
		t.Helper()
		var out answer
		if err := json.Unmarshal([]byte(a.body), &out); err != nil {
			t.Fatalf("loglevel answer %d %q: %v", a.code, a.body, err)
		}
		return out
	}
	if got := decode(do(t, http.MethodGet, u, nil, "")); got != (answer{Level: "info", Settable: true}) {
		t.Errorf("GET = %+v", got)
	}
	changes := []struct {
		method, url, contentType, body, want string
	}{
		{http.MethodPut, u + "?level=debug", "", "", "debug"},
		{http.MethodPost, u, "application/x-www-form-urlencoded", url.Values{"level": {"warn"}}.Encode(), "warn"},
		{http.MethodPut, u, "application/json", `{"level":"error"}`, "error"},
		{http.MethodPut, u, "application/json", `{"level":"INFO"}`, "info"},
	}
	prev := "info"
	for _, c := range changes {
		a := do(t, c.method, c.url, map[string]string{"Content-Type": c.contentType}, c.body)
		if a.code != http.StatusOK {
			t.Fatalf("%s %s %q = %d %q", c.method, c.url, c.body, a.code, a.body)
		}
		if got := decode(a); got != (answer{Level: c.want, Previous: prev, Settable: true}) {
			t.Errorf("%s %s %q = %+v", c.method, c.url, c.body, got)
		}
		if level.Level().String() != c.want {
			t.Errorf("after %s %s %q the level is %v, want %s", c.method, c.url, c.body, level.Level(), c.want)
		}
		prev = c.want
	}
	for _, bad := range []string{u + "?level=verbose", u + "?level=fatal", u} {
		if a := do(t, http.MethodPut, bad, nil, ""); a.code != http.StatusBadRequest {
			t.Errorf("PUT %s = %d %q, want 400", bad, a.code, a.body)
		}
	}
	if level.Level() != zapcore.InfoLevel {
		t.Errorf("a bad request changed the level to %v", level.Level())
	}
	if a := do(t, http.MethodDelete, u, nil, ""); a.code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE = %d, want 405", a.code)
	}

	// Without WithLogLevel the level shows but does not change.
	fixed := statusAdmin(t, statusConfig())
	if got := decode(do(t, http.MethodGet, fixed.URL+"/debug/loglevel", nil, "")); got.Settable || got.Level == "" {
		t.Errorf("GET without WithLogLevel = %+v", got)
	}
	if a := do(t, http.MethodPut, fixed.URL+"/debug/loglevel?level=debug", nil, ""); a.code != http.StatusNotImplemented {
		t.Errorf("PUT without WithLogLevel = %d, want 501", a.code)
	}
}
