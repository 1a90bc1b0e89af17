// Package admin is the relay's admin HTTP API (docs/INTERFACE.md, "Admin
// HTTP"): liveness and readiness, POST and DELETE /drain, Prometheus
// metrics, the JSON debug views (/debug/cache, /debug/clients,
// /debug/upstreams, /debug/rollouts, /debug/gateway), the effective
// configuration with secrets redacted, the runtime log level, pprof, and
// the HTML status page at "/".
//
// Handler reads the relay only through Source, a small interface that
// *relay.Relay satisfies: the relay's own debug views, its readiness, its
// configuration and its metrics registry. StartDrain and EndDrain are the
// only calls that change the relay. The package takes no lock of its own.
//
// The handler Handler returns, OverviewOf and RedactConfig are safe for
// concurrent use.
package admin
