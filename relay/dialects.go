package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/csds"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/rest"
)

// The other ways in (CONTRACT.md, "More ways in"): edge packages on the same
// seams as the downstream server, wired here.
//   - rest: REST-JSON polls are short-lived watchers of the Relay (Source).
//   - csds: the downstream server's streams, read through its read-only
//     snapshot (Refs, ClientStates), served on the downstream listener.

// dialects holds the edge servers. Set in New, read-only after.
type dialects struct {
	rest *rest.Server // nil without the rest section
	csds *csds.Server

	mu       sync.Mutex
	restHTTP *http.Server // guarded by mu: set by ServeREST
}

// newDialects creates the edge servers. Called from New.
func (r *Relay) newDialects() {
	r.dx = &dialects{}
	az := authorizer(r.cfg.Authorization)
	r.dx.csds = csds.New(r.ds, csds.Options{Authorize: az, Logger: r.log.Named("csds")})
	r.dx.csds.Register(r.grpc)
	if c := r.cfg.REST; c != nil {
		r.dx.rest = rest.New(r, rest.Options{
			PollTimeout:    c.PollTimeout,
			MaxBodyBytes:   int64(r.cfg.Limits.MaxRecvMessageBytes),
			MaxNames:       r.cfg.Limits.MaxNamesPerRequest,
			Authorize:      az,
			NodeParameters: nodeParameters(r.cfg.Keying),
			NewID:          r.ds.NewWatcherID,
			Logger:         r.log.Named("rest"),
			Metrics:        r.m,
		})
	}
}

// ServeREST serves REST-JSON polling on lis (the rest section's listener)
// until Shutdown or Close, over TLS when the tls section is set (with client
// certificates required when it has a client CA, as on the gRPC listener).
func (r *Relay) ServeREST(lis net.Listener) error {
	if r.dx.rest == nil {
		return errors.New("relay: rest: not configured")
	}
	hs := &http.Server{
		Handler:           r.dx.rest.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          zap.NewStdLog(r.log.Named("rest")),
	}
	if t := r.cfg.TLS; t != nil {
		src, err := tlsconfig.NewSource(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile},
			r.log.Named("rest.tls"))
		if err != nil {
			return fmt.Errorf("relay: rest: %w", err)
		}
		if hs.TLSConfig, err = src.ServerConfig(); err != nil {
			return fmt.Errorf("relay: rest: %w", err)
		}
		lis = tls.NewListener(lis, hs.TLSConfig)
	}
	r.dx.mu.Lock()
	if r.isClosed() {
		r.dx.mu.Unlock()
		return nil
	}
	r.dx.restHTTP = hs
	r.dx.mu.Unlock()
	if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay: rest: %w", err)
	}
	return nil
}

func (r *Relay) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed || r.draining.Load()
}

// closeDialects ends the edge servers: held REST polls are answered 503 and
// the REST listener closes (within ctx, then at once).
func (r *Relay) closeDialects(ctx context.Context) {
	if r.dx.rest != nil {
		r.dx.rest.Close()
	}
	r.dx.mu.Lock()
	hs := r.dx.restHTTP
	r.dx.restHTTP = nil
	r.dx.mu.Unlock()
	if hs != nil {
		if err := hs.Shutdown(ctx); err != nil {
			_ = hs.Close()
		}
	}
}

// dialectClients lists the edge clients for /debug/clients: REST polls being
// held (only those of nodeID when it is non-empty).
func (r *Relay) dialectClients(nodeID string) []downstream.StreamInfo {
	var out []downstream.StreamInfo
	if r.dx.rest != nil {
		for _, p := range r.dx.rest.Polls() {
			if nodeID == "" || p.NodeID == nodeID {
				out = append(out, p)
			}
		}
	}
	return out
}
