// Package admin is the relay's admin HTTP API (docs/INTERFACE.md, "Admin
// HTTP"): liveness and readiness, POST and DELETE /drain, Prometheus
// metrics, the JSON debug views (/debug/cache, /debug/config_dump, /debug/clients,
// /debug/upstreams, /debug/rollouts, /debug/gateway), the effective
// configuration with secrets redacted, the runtime log level, pprof, and
// the HTML status page at "/". ProbeHandler serves the probes and the
// metrics alone, for a listener on the pod IP.
//
// Handler reads the relay only through Source, a small interface that
// *relay.Relay satisfies: the relay's own debug views, its readiness, its
// configuration and its metrics registry. StartDrain and EndDrain are the
// only calls that change the relay. The package takes no lock of its own.
//
// The handlers Handler and ProbeHandler return, OverviewOf and RedactConfig
// are safe for concurrent use.
package admin
