package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway"
	"github.com/xds-relay/xds-relay/lrs"
	"github.com/xds-relay/xds-relay/relay"
)

// Source is what the admin API reads of a relay; *relay.Relay satisfies it.
// StartDrain and EndDrain are its only methods that change anything (POST
// and DELETE /drain).
type Source interface {
	// Readiness is the answer of /readyz.
	Readiness() (ready bool, reason string)
	// StartDrain serves POST /drain and EndDrain DELETE /drain; each
	// reports whether it changed anything.
	StartDrain() bool
	EndDrain() bool
	// Config is the configuration the relay runs with; it is not modified.
	Config() *config.Config
	// Logger is the relay's logger: the admin API logs through it.
	Logger() *zap.Logger
	// Registry holds the relay's metrics (/metrics and the status page).
	Registry() *prometheus.Registry
	DebugCache(relay.CacheFilter) []relay.CacheEntryInfo
	DebugClients(nodeID string) []relay.ClientInfo
	DebugClientsPage(relay.ClientQuery) relay.ClientPage
	DebugUpstreams() []relay.UpstreamInfo
	DebugRollouts() []relay.RolloutInfo
	DebugGateway(nodeID string) gateway.DebugInfo
	// DebugLRS is what load reporting does now (the status page's LRS
	// section).
	DebugLRS() lrs.Status
}

var _ Source = (*relay.Relay)(nil)

// Endpoint documents one path of the admin HTTP API.
type Endpoint struct {
	// Route is the methods and path, with the query parameters it reads.
	Route string
	// Doc says what it answers.
	Doc string
}

// Endpoints lists every path of Handler, as the admin index (GET / from curl)
// and `xds-relay --help` show them.
var Endpoints = []Endpoint{
	{"GET /", "status page (HTML in a browser, ?format=json), this index otherwise"},
	{"GET /healthz", `200 "ok" while the process runs (liveness)`},
	{"GET /readyz", "200 when serving and synced with an upstream (or warm from cache.persist_path); " +
		"503 before that and while draining; the body says why (readiness)"},
	{"GET /metrics", "Prometheus text format (xds_relay_*, go_*, process_*)"},
	{"POST /drain", "202: take the relay out of service until DELETE /drain: /readyz 503, gRPC health NOT_SERVING, " +
		"the client connections open now closed over shutdown.drain_window (their streams end with UNAVAILABLE), " +
		"new xDS streams refused with UNAVAILABLE, new REST polls 503; the listeners and the upstreams stay up"},
	{"DELETE /drain", "200: end the drain of POST /drain (also when none lasts): /readyz and gRPC health answer as " +
		"without it, new streams are accepted; a SIGTERM shutdown is never ended"},
	{"GET /debug/cache?type=&prefix=&authority=", "JSON: the cached resource variants"},
	{"GET /debug/config_dump?type=&name=&node=&limit=&next=", "JSON: the cached resources with their bodies " +
		"(type: a type URL or its last element; node: what that client holds; limit: 100, at most 1000), " +
		"and the path of the next page"},
	{"GET /debug/clients?node=&type=&name=&after=&limit=&names=", "JSON: one page of the downstream streams " +
		"(node: glob on the node id; limit: 100, at most 1000; names per type: 100), the total and the next page"},
	{"GET /debug/upstreams", "JSON: the upstream clients and their connection state"},
	{"GET /debug/rollouts", "JSON: guarded rollouts pending and recently resolved"},
	{"GET /debug/gateway?node=", "JSON: gateway.control.v1 groups and the latest status report of each data plane"},
	{"GET /debug/config", "JSON: the effective config, secrets redacted"},
	{"GET|PUT|POST /debug/loglevel?level=", "show, or change at once, the log level (debug, info, warn, error)"},
	{"GET /debug/pprof/", "Go profiles"},
}

// server is the state of one Handler: the relay it reads and its options.
type server struct {
	// set at creation, read-only
	src Source
	log *zap.Logger
	o   options
}

// Handler returns the admin HTTP API of src (docs/INTERFACE.md, "Admin
// HTTP"): the paths of Endpoints. Every other method gets 405, every other
// path 404. With WithToken, /drain and /debug/* answer 401 to a call
// without the token. Every call but GET and HEAD is logged at Info with the
// caller's address. The handler has its own mux (pprof is not served from
// http.DefaultServeMux) and is safe for concurrent use; each call returns a
// new handler.
func Handler(src Source, opts ...Option) http.Handler {
	s := &server{src: src, log: src.Logger()}
	for _, opt := range opts {
		opt(&s.o)
	}
	mux := http.NewServeMux()
	// Method patterns make the mux answer 405 (with Allow) to other methods.
	s.statusRoutes(mux) // /, /debug/config, /debug/loglevel (status.go)
	s.probeRoutes(mux)  // /healthz, /readyz, /metrics (probe.go)
	mux.HandleFunc("POST /drain", func(w http.ResponseWriter, _ *http.Request) {
		msg := "draining"
		if !s.src.StartDrain() {
			msg = "already draining"
		}
		writeText(w, http.StatusAccepted, fmt.Sprintf("%s: client connections close over %v; /readyz answers 503 "+
			"until DELETE /drain\n", msg, s.src.Config().Shutdown.DrainWindow))
	})
	mux.HandleFunc("DELETE /drain", func(w http.ResponseWriter, _ *http.Request) {
		msg := "drain ended: serving"
		if !s.src.EndDrain() {
			msg = "not draining"
		}
		ok, why := s.src.Readiness()
		if !ok {
			msg += "; still not ready: " + why
		}
		writeText(w, http.StatusOK, msg+"\n")
	})

	mux.HandleFunc("GET /debug/cache", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		s.writeJSON(w, s.src.DebugCache(relay.CacheFilter{
			Type:       q.Get("type"),
			NamePrefix: q.Get("prefix"),
			Authority:  q.Get("authority"),
		}))
	})
	mux.HandleFunc("GET "+dumpPath, s.configDump)
	mux.HandleFunc("GET /debug/clients", func(w http.ResponseWriter, req *http.Request) {
		q, err := clientQuery(req.URL.Query())
		if err != nil {
			http.Error(w, "admin: /debug/clients: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.writeJSON(w, s.src.DebugClientsPage(q))
	})
	mux.HandleFunc("GET /debug/upstreams", func(w http.ResponseWriter, _ *http.Request) {
		s.writeJSON(w, s.src.DebugUpstreams())
	})
	mux.HandleFunc("GET /debug/rollouts", func(w http.ResponseWriter, _ *http.Request) {
		s.writeJSON(w, s.src.DebugRollouts())
	})
	// The edge servers' admin views.
	mux.HandleFunc("GET /debug/gateway", func(w http.ResponseWriter, req *http.Request) {
		s.writeJSON(w, s.src.DebugGateway(req.URL.Query().Get("node")))
	})

	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // also serves the named profiles
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return s.logCalls(s.requireToken(mux))
}

// logCalls logs every call to h but GET and HEAD (the calls that may
// change something) at Info: method, path, the caller's address and the
// status answered.
func (s *server) logCalls(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			h.ServeHTTP(w, req)
			return
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, req)
		s.log.Info("admin call", zap.String("method", req.Method), zap.String("path", req.URL.Path),
			zap.String("remote", req.RemoteAddr), zap.Int("status", sw.code))
	})
}

// statusWriter records the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code    int
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.code, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// clientQuery reads the query of /debug/clients.
func clientQuery(v url.Values) (relay.ClientQuery, error) {
	q := relay.ClientQuery{Node: v.Get("node"), Type: v.Get("type"), Name: v.Get("name")}
	var err error
	if s := v.Get("after"); s != "" {
		if q.After, err = strconv.ParseUint(s, 10, 64); err != nil {
			return q, fmt.Errorf("after=%q: want a stream id", s)
		}
	}
	for _, p := range []struct {
		key string
		dst *int
	}{{"limit", &q.Limit}, {"names", &q.Names}} {
		if s := v.Get(p.key); s != "" {
			if *p.dst, err = strconv.Atoi(s); err != nil || *p.dst <= 0 {
				return q, fmt.Errorf("%s=%q: want a positive integer", p.key, s)
			}
		}
	}
	return q, nil
}

// adminIndexText is the plain-text index of GET / for curl.
var adminIndexText = func() string {
	var b strings.Builder
	b.WriteString("xds-relay admin\n")
	for _, e := range Endpoints {
		fmt.Fprintf(&b, "%s\n    %s\n", e.Route, e.Doc)
	}
	return b.String()
}()

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprint(w, body)
}

// writeJSON writes v as indented JSON; a nil list is written "[]", not "null".
func (s *server) writeJSON(w http.ResponseWriter, v any) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []struct{}{}
	}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Error("admin: encode JSON", zap.Error(err))
		http.Error(w, "admin: encode JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}
