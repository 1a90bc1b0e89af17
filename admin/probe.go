package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// ProbeHandler returns the probe HTTP API of src, for --probe-listen: GET
// /healthz, GET /readyz and GET /metrics as Handler serves them — what the
// kubelet's probes and Prometheus need, nothing that reveals node ids or
// changes anything. Every
// other path gets 404 (other methods on these paths 405), so that it can
// listen on the pod IP while the admin API stays on loopback. It is safe for
// concurrent use.
func ProbeHandler(src Source) http.Handler {
	s := &server{src: src, log: src.Logger()}
	mux := http.NewServeMux()
	s.probeRoutes(mux)
	return mux
}

// probeRoutes adds /healthz, /readyz and /metrics to mux.
func (s *server) probeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := s.src.Readiness()
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		writeText(w, code, why+"\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.src.Registry(), promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(s.log.Named("admin")),
		ErrorHandling: promhttp.ContinueOnError,
	}))
}
