package relay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"reflect"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// AdminHandler returns the admin HTTP API (CONTRACT.md, "Admin HTTP"):
//
//	GET /                                        status page (HTML for browsers, ?format=json), else a text index
//	GET /healthz                                 200 "ok" while the process runs
//	GET /readyz                                  200 when Ready, else 503
//	GET /metrics                                 Prometheus text format of Registry
//	GET /debug/cache?type=&prefix=&authority=    JSON of DebugCache
//	GET /debug/clients?node=                     JSON of DebugClients
//	GET /debug/upstreams                         JSON of DebugUpstreams
//	GET /debug/rollouts                          JSON list; empty until rollouts exist
//	GET /debug/gateway?node=                     JSON of DebugGateway (gateway.control.v1 groups, status reports)
//	GET /debug/config                            JSON of EffectiveConfig (secrets redacted)
//	GET|PUT|POST /debug/loglevel[?level=debug]   show or change the log level (see WithLogLevel)
//	GET /debug/pprof/...                         net/http/pprof
//
// Every other method gets 405, every other path 404. The handler has its own
// mux (pprof is not served from http.DefaultServeMux) and is safe for
// concurrent use; each call returns a new handler.
func (r *Relay) AdminHandler(opts ...AdminOption) http.Handler {
	mux := http.NewServeMux()
	// Method patterns make the mux answer 405 (with Allow) to other methods.
	r.statusRoutes(mux, opts) // /, /debug/config, /debug/loglevel (status.go)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if r.Ready() {
			writeText(w, http.StatusOK, "ready\n")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.Registry(), promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(r.log.Named("admin")),
		ErrorHandling: promhttp.ContinueOnError,
	}))

	mux.HandleFunc("GET /debug/cache", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		r.writeJSON(w, r.DebugCache(CacheFilter{
			Type:       q.Get("type"),
			NamePrefix: q.Get("prefix"),
			Authority:  q.Get("authority"),
		}))
	})
	mux.HandleFunc("GET /debug/clients", func(w http.ResponseWriter, req *http.Request) {
		r.writeJSON(w, r.DebugClients(req.URL.Query().Get("node")))
	})
	mux.HandleFunc("GET /debug/upstreams", func(w http.ResponseWriter, _ *http.Request) {
		r.writeJSON(w, r.DebugUpstreams())
	})
	mux.HandleFunc("GET /debug/rollouts", func(w http.ResponseWriter, _ *http.Request) {
		r.writeJSON(w, r.DebugRollouts())
	})
	r.dialectRoutes(mux) // /debug/gateway

	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // also serves the named profiles
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

const adminIndexText = `xds-relay admin
/                  status page (open in a browser, or ?format=json)
/healthz
/readyz
/metrics
/debug/cache?type=&prefix=&authority=
/debug/clients?node=
/debug/upstreams
/debug/rollouts
/debug/gateway?node=
/debug/config
/debug/loglevel    PUT ?level=debug|info|warn|error to change
/debug/pprof/
`

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprint(w, body)
}

// writeJSON writes v as indented JSON; a nil list is written "[]", not "null".
func (r *Relay) writeJSON(w http.ResponseWriter, v any) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []struct{}{}
	}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		r.log.Error("admin: encode JSON", zap.Error(err))
		http.Error(w, "admin: encode JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}
