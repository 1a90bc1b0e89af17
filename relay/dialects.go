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

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/reflection"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/csds"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/lrs"
	"github.com/xds-relay/xds-relay/rest"
	"github.com/xds-relay/xds-relay/upstream"
)

// The other ways in (CONTRACT.md, "More ways in"): edge packages on the same
// seams as the downstream server, wired here.
//   - rest: REST-JSON polls are short-lived watchers of the Relay (Source).
//   - csds: the downstream server's streams, read through its read-only
//     snapshot (Refs, ClientStates), served on the downstream listener.
//   - gateway: gateway.control.v1 on the downstream listener, relayed to the
//     default upstream servers with a cache of its own (see package gateway).
//   - lrs: load reporting on the downstream listener; the aggregate goes to
//     the server the xDS stream of the cluster's authority is on, in the
//     client's node group's scope (lrsServer).
//   - gRPC server reflection (v1 and v1alpha) on the downstream listener, so
//     that grpcurl and grpcui can call CSDS and the gateway services without
//     the .proto files at hand. It describes the services; it reads no state.

// dialects holds the edge servers. Set in New, read-only after.
type dialects struct {
	rest *rest.Server // nil without the rest section
	csds *csds.Server
	gw   *gateway.Server
	lrs  *lrs.Server

	mu       sync.Mutex
	restHTTP *http.Server // guarded by mu: set by ServeREST
}

// newDialects creates the edge servers. Called from New.
func (r *Relay) newDialects() error {
	r.dx = &dialects{}
	az := authz.New(r.cfg.Authorization)
	r.dx.csds = csds.New(r.ds, csds.Options{Authorize: az, Logger: r.log.Named("csds")})
	r.dx.csds.Register(r.grpc)

	gw := gateway.Options{NodeID: r.node.GetId(), Cluster: r.node.GetCluster(), Linger: r.linger, Authorize: az,
		NewID: r.ds.NewWatcherID, Metrics: r.m, Logger: r.log.Named("gateway")}
	for i, s := range r.cfg.Upstream.XDSServers {
		c := r.creds.upstream[""][i]
		gw.Upstreams = append(gw.Upstreams, gateway.Upstream{URI: s.ServerURI, Creds: c.transport, CallCreds: c.calls})
	}
	if c := r.cfg.Gateway; c != nil {
		gw.GroupBy, gw.ReportRetries = c.GroupBy, c.ReportRetries
	}
	if p := r.cfg.Cache.PersistPath; p != "" {
		gw.PersistPath, gw.PersistInterval = p+".gateway", r.cfg.Cache.PersistInterval
	}
	var err error
	if r.dx.gw, err = gateway.New(gw); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	r.dx.gw.Register(r.grpc)
	newLRS(r, az)
	reflection.Register(r.grpc)
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
	return nil
}

// newLRS creates the load reporting server over the default servers and
// the authorities with servers of their own, with one destination per node
// group under keying.group_by.
func newLRS(r *Relay, az authz.Authorizer) {
	o := lrs.Options{Upstreams: lrsUpstreams(r, "", r.cfg.Upstream.XDSServers), Current: func(auth, group string) string {
		return lrsServer(r, auth, group)
	},
		Authorities: map[string]lrs.Authority{}, Node: r.node, Authorize: az, Metrics: r.m, Logger: r.log.Named("lrs")}
	for auth, a := range r.cfg.Upstream.Authorities {
		if len(a.XDSServers) > 0 {
			o.Authorities[auth] = lrs.Authority{Upstreams: lrsUpstreams(r, auth, a.XDSServers)}
		}
	}
	if len(r.groupBy) > 0 {
		o.Group = func(node *corev3.Node) (string, *corev3.Node) {
			key := keying.GroupKey(r.groupBy, node)
			if key == "" {
				return "", nil
			}
			return key, keying.GroupNode(r.node, r.groupBy, node, key)
		}
	}
	r.dx.lrs = lrs.New(o)
	r.dx.lrs.Register(r.grpc)
}

// lrsUpstreams are the servers of auth with their credentials.
func lrsUpstreams(r *Relay, auth string, servers []config.Server) []lrs.Upstream {
	out := make([]lrs.Upstream, len(servers))
	for i, s := range servers {
		c := r.creds.upstream[auth][i]
		out[i] = lrs.Upstream{URI: s.ServerURI, Creds: c.transport, CallCreds: c.calls}
	}
	return out
}

// lrsServer is the server of auth that the xDS stream of group's scope (the
// shared scope for "") is on or tries; "" when it has none.
func lrsServer(r *Relay, auth, group string) string {
	s := r.lock()
	sc := s.shared
	if group != "" {
		sc = s.scopes["group:"+group]
	}
	var c *upstream.Client
	if sc != nil {
		c = sc.upstreams[auth]
	}
	s.unlock()
	if c == nil {
		return ""
	}
	_, server := c.State()
	return server
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
		cfg, stop, err := tlsconfig.ServerConfig(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile},
			t.RefreshInterval)
		if err != nil {
			return fmt.Errorf("relay: rest: %w", err)
		}
		defer stop()
		hs.TLSConfig = cfg
		lis = tls.NewListener(lis, cfg)
	}
	r.dx.mu.Lock()
	s := r.lock()
	closed := s.closed
	s.unlock()
	if closed || r.draining.Load() { // drained before it began: the listener closes all the same
		r.dx.mu.Unlock()
		_ = lis.Close()
		return nil
	}
	r.dx.restHTTP = hs
	r.dx.mu.Unlock()
	if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay: rest: %w", err)
	}
	return nil
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
// held and gateway data plane streams (only those of nodeID when it is
// non-empty).
func (r *Relay) dialectClients(nodeID string) []downstream.StreamInfo {
	out := r.dx.gw.Streams(nodeID)
	if r.dx.rest != nil {
		for _, p := range r.dx.rest.Polls() {
			if nodeID == "" || p.NodeID == nodeID {
				out = append(out, p)
			}
		}
	}
	return out
}

// DebugGateway is /debug/gateway: the gateway's groups and the latest status
// report of each data plane (only nodeID's when it is non-empty; at most
// 1000).
func (r *Relay) DebugGateway(nodeID string) gateway.DebugInfo { return r.dx.gw.Debug(nodeID, 1000) }

// setRefusing turns the refusal of new REST polls on or off (the reversible
// drain; new xDS streams are refused by the downstream server).
func (dx *dialects) setRefusing(on bool) {
	if dx.rest != nil {
		dx.rest.SetRefusing(on)
	}
}

// DebugLRS is what load reporting does now: the client streams, the
// clusters of the interval in flight and each upstream LRS stream.
func (r *Relay) DebugLRS() lrs.Status { return r.dx.lrs.Status() }
