package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// Version is the relay's version, reported to upstreams as the node's user
// agent version. Set by the binaries' -ldflags.
var Version = "dev"

// DefaultUnavailableAfter is how long a subscribed, uncached resource waits
// for an unreachable upstream before clients get a TP3 UNAVAILABLE error.
const DefaultUnavailableAfter = 10 * time.Second

// DefaultLinger is how long a resource stays subscribed upstream after its
// last watcher left, when the config does not say.
const DefaultLinger = 5 * time.Second

// Relay wires the upstream clients, the cache and the downstream server.
type Relay struct {
	// set at creation, read-only
	cfg    *config.Config
	log    *zap.Logger
	m      *metrics.Metrics
	ds     *downstream.Server
	grpc   *grpc.Server
	linger time.Duration
	// persist writes the warm-restart file; nil without cache.persist_path.
	persist *persister
	// dx holds the other ways in: REST-JSON, CSDS, gateway (dialects.go).
	dx *dialects

	serving  atomic.Bool
	draining atomic.Bool

	// node is the relay's own node; upCreds the upstream servers' transport
	// credentials by authority.
	node    *corev3.Node
	upCreds map[string][]credentials.TransportCredentials

	mu      sync.Mutex
	scopes  map[string]*scope                // guarded by mu; by scope key
	shared  *scope                           // the scope every stream uses by default
	bound   map[uint64]*binding              // guarded by mu: streams (by id) and their scopes
	unref   *simplelru.LRU[lruKey, struct{}] // guarded by mu: unreferenced resources
	evicted []lruKey                         // guarded by mu: collected by the LRU callback
	// rolloutLog keeps the last resolved rollouts for /debug/rollouts.
	rolloutLog []*rollout // guarded by mu
	closed     bool       // guarded by mu
}

// lruKey names an unreferenced resource of a scope.
type lruKey struct {
	scope string
	keying.Key
}

// New builds a relay from a validated config. It dials upstreams lazily, when
// the first client subscribes.
func New(cfg *config.Config, log *zap.Logger) (*Relay, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if len(cfg.Upstream.XDSServers) == 0 {
		return nil, errors.New("relay: no upstream xds_servers configured")
	}
	// TLS files are read before anything starts, so that a bad one fails New.
	srvCreds, upCreds, err := transportCreds(cfg, log)
	if err != nil {
		return nil, err
	}
	r := &Relay{
		cfg:     cfg,
		log:     log,
		m:       metrics.New(),
		linger:  cfg.Upstream.Linger,
		node:    relayNode(cfg),
		upCreds: upCreds,
		scopes:  make(map[string]*scope),
		bound:   make(map[uint64]*binding),
	}
	if r.linger <= 0 {
		r.linger = DefaultLinger
	}
	size := cfg.Cache.MaxUnreferenced
	if size <= 0 {
		size = 1 // simplelru needs a positive size; 0 keeps nothing unreferenced
	}
	lru, err := simplelru.NewLRU[lruKey, struct{}](size, func(k lruKey, _ struct{}) {
		r.evicted = append(r.evicted, k)
	})
	if err != nil {
		return nil, fmt.Errorf("relay: cache: %w", err)
	}
	r.unref = lru
	if cfg.Cache.MaxUnreferenced == 0 {
		r.unref.Resize(1)
	}

	r.shared = r.newScope("", r.node, false)
	if p := cfg.Cache.PersistPath; p != "" {
		r.loadPersisted(p)
		r.persist = newPersister(p, log.Named("persist"), r.currentCache)
	}

	lim := cfg.Limits
	r.ds = downstream.NewServer(r, downstream.Options{
		MaxNamesPerRequest:  lim.MaxNamesPerRequest,
		MaxSubscriptions:    lim.MaxSubscriptionsPerStream,
		NewStreamsPerSecond: lim.NewStreamsPerSecond,
		Authorize:           authorizer(cfg.Authorization),
		NodeParameters:      nodeParameters(cfg.Keying),
		Logger:              log.Named("downstream"),
		Metrics:             r.m,
	})
	ka := keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}
	if lim.MaxConnectionAge > 0 {
		// grpc adds ±10% jitter, so clients of a fleet do not reconnect at once.
		ka.MaxConnectionAge, ka.MaxConnectionAgeGrace = lim.MaxConnectionAge, 30*time.Second
	}
	opts := append(downstream.ServerOptions(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: lim.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(ka),
		grpc.StatsHandler(connCounter{r.m.DownstreamConnections}),
	)
	if n := lim.MaxStreamsPerConnection; n > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(n)))
	}
	if n := cfg.Limits.MaxRecvMessageBytes; n > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(n))
	}
	if srvCreds != nil {
		opts = append(opts, grpc.Creds(srvCreds))
	}
	r.grpc = grpc.NewServer(opts...)
	r.ds.Register(r.grpc)
	if err := r.newDialects(); err != nil {
		return nil, err
	}
	return r, nil
}

// relayNode is the node the relay presents upstream: its own, from config.
func relayNode(cfg *config.Config) *corev3.Node {
	n := &corev3.Node{
		Id:                   cfg.Node.ID,
		Cluster:              cfg.Node.Cluster,
		UserAgentName:        "xds-relay",
		UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: Version},
	}
	if n.Id == "" {
		n.Id = "xds-relay"
	}
	if len(cfg.Node.Metadata) > 0 {
		fields := make(map[string]any, len(cfg.Node.Metadata))
		for k, v := range cfg.Node.Metadata {
			fields[k] = v
		}
		if md, err := structpb.NewStruct(fields); err == nil {
			n.Metadata = md
		}
	}
	return n
}

// newClient creates the upstream client of auth; creds[i] are the transport
// credentials of servers[i] (nil: plaintext).
func (r *Relay) newClient(sc *scope, auth string, servers []config.Server) *upstream.Client {
	creds := r.upCreds[auth]
	if auth != "" && len(r.cfg.Upstream.Authorities[auth].XDSServers) == 0 {
		creds = r.upCreds[""]
	}
	cfgs := make([]upstream.ServerConfig, len(servers))
	for i, s := range servers {
		cfgs[i] = upstream.ServerConfig{URI: s.ServerURI, Mode: protocolMode(s.Protocol)}
		if i < len(creds) {
			cfgs[i].Creds = creds[i]
		}
	}
	log := r.log.Named("upstream").With(zap.String("authority", auth))
	if sc.key != "" {
		log = log.With(zap.String("scope", sc.key))
	}
	return upstream.New(upstream.Config{
		Authority: auth,
		Servers:   cfgs,
		Node:      sc.node,
		Mode:      upstream.ModeAuto,
		Logger:    log,
		// Delta: tell the server which versions the cache already holds, so
		// that a reconnect does not resend them.
		InitialVersions: func(typeURL string) map[string]string { return r.upstreamVersions(sc, auth, typeURL) },
	}, &upstreamHandler{r: r, sc: sc, authority: auth})
}

// transportCreds reads the TLS files of the config: the downstream server's
// credentials (nil: plaintext) and, by authority ("" for the default
// servers), the credentials of each upstream server in the order newClient
// gets them.
func transportCreds(cfg *config.Config, log *zap.Logger) (credentials.TransportCredentials, map[string][]credentials.TransportCredentials, error) {
	var srv credentials.TransportCredentials
	if t := cfg.TLS; t != nil {
		var err error
		srv, err = tlsconfig.ServerCredentials(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile},
			log.Named("tls"))
		if err != nil {
			return nil, nil, fmt.Errorf("relay: tls: %w", err)
		}
	}
	up := map[string][]credentials.TransportCredentials{}
	add := func(auth string, servers []config.Server) error {
		if len(servers) == 0 {
			servers = cfg.Upstream.XDSServers
		}
		ulog := log.Named("upstream").With(zap.String("authority", auth))
		for _, s := range servers {
			c, err := channelCreds(s, ulog.With(zap.String("server", s.ServerURI)))
			if err != nil {
				return err
			}
			up[auth] = append(up[auth], c)
		}
		return nil
	}
	if err := add("", cfg.Upstream.XDSServers); err != nil {
		return nil, nil, err
	}
	for auth, a := range cfg.Upstream.Authorities {
		if err := add(auth, a.XDSServers); err != nil {
			return nil, nil, err
		}
	}
	return srv, up, nil
}

// channelCreds returns the transport credentials of s's first channel_creds
// entry (gRPC bootstrap: the first supported type; both are): nil for
// insecure or none.
func channelCreds(s config.Server, log *zap.Logger) (credentials.TransportCredentials, error) {
	if len(s.ChannelCreds) == 0 || s.ChannelCreds[0].Type != "tls" {
		return nil, nil
	}
	t, err := s.ChannelCreds[0].TLS()
	if err != nil {
		return nil, fmt.Errorf("relay: upstream %s: channel_creds: %w", s.ServerURI, err)
	}
	creds, err := tlsconfig.ClientCredentials(tlsconfig.Files{
		CertFile: t.CertificateFile, KeyFile: t.PrivateKeyFile, CAFile: t.CACertificateFile,
	}, log.Named("tls"))
	if err != nil {
		return nil, fmt.Errorf("relay: upstream %s: %w", s.ServerURI, err)
	}
	return creds, nil
}

// connCounter keeps the downstream connection gauge.
type connCounter struct{ g prometheus.Gauge }

func (c connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.g.Inc()
	case *stats.ConnEnd:
		c.g.Dec()
	}
}

func protocolMode(p string) upstream.Mode {
	switch p {
	case "sotw":
		return upstream.ModeSotW
	case "delta":
		return upstream.ModeDelta
	}
	return upstream.ModeAuto
}

// Serve serves downstream xDS on lis until Shutdown or Close.
func (r *Relay) Serve(lis net.Listener) error {
	r.serving.Store(true)
	defer r.serving.Store(false)
	if err := r.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("relay: serve: %w", err)
	}
	return nil
}

// Ready reports whether the downstream listener serves and the relay is not draining.
func (r *Relay) Ready() bool { return r.serving.Load() && !r.draining.Load() }

// Shutdown drains: readiness turns false, clients get GOAWAY, streams end on
// their own or are closed when ctx expires, then the upstreams close.
func (r *Relay) Shutdown(ctx context.Context) {
	r.draining.Store(true)
	r.closeDialects(ctx)
	done := make(chan struct{})
	go func() {
		r.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.grpc.Stop()
		<-done
	}
	r.Close()
}

// Close stops everything at once: downstream streams end, upstream streams
// close, and every goroutine of the relay has returned when it returns.
func (r *Relay) Close() {
	r.draining.Store(true)
	// Held REST polls are answered at once; give them that moment.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r.closeDialects(ctx)
	cancel()
	r.grpc.Stop()
	r.ds.Close()
	r.closeGateway()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	var clients []*upstream.Client
	for _, sc := range r.scopes {
		clients = append(clients, r.stopScope(sc)...)
	}
	r.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	if r.persist != nil {
		r.persist.close()
	}
}

// Registry is the relay's own Prometheus registry.
func (r *Relay) Registry() *prometheus.Registry { return r.m.Registry }
