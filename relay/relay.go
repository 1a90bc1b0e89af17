package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	channelz "google.golang.org/grpc/channelz/service"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/upstream"
)

// Version is the relay's version, reported to upstreams as the node's user
// agent version. cmd/xds-relay sets it from its main.version, which the
// build's -ldflags set ("-X main.version=v1.2.3").
var Version = "dev"

// Relay wires the upstream clients, the cache and the downstream server.
type Relay struct {
	// set at creation, read-only
	*parts
	ds   *downstream.Server
	grpc *grpc.Server
	// dx holds the other ways in: REST-JSON, CSDS, gateway (dialects.go).
	dx *dialects

	// lifecycle (lifecycle.go)
	serving   atomic.Bool
	draining  atomic.Bool
	synced    atomic.Bool // an upstream stream was established since the start
	warm      atomic.Bool // the warm-restart file filled the cache
	drainOnce sync.Once
	drainDone chan struct{} // closed when the drain is over; set by drainOnce
	life      context.Context
	endLife   context.CancelFunc // cuts a drain short (Close)
	maint     maintenance        // the reversible drain (drain.go)
	health    *health.Server     // grpc.health.v1 on the xDS listener: readiness
	healthMu  sync.Mutex         // serialises updateHealth

	mu sync.Mutex
	st state // guarded by mu: only lock hands it out
}

// parts are the relay's parts set in New and read-only after: the Relay and
// its state share them.
type parts struct {
	cfg    *config.Config
	log    *zap.Logger
	m      *metrics.Metrics
	linger time.Duration
	// persist writes the warm-restart file; nil without cache.persist_path.
	persist *persister
	// node is the relay's own node; creds the credentials of the listener
	// and of the upstream servers.
	node  *corev3.Node
	creds *credsSet
	// groupBy is keying.group_by sorted (a copy: the config is never
	// modified), so that one group has one key whatever the field order.
	groupBy []string
	// fan delivers the notifications the relay makes under mu, outside it.
	fan *fanout
}

// state is what Relay.mu guards: the scopes with their caches and
// registries, the bound streams and the LRU of unreferenced resources. Only
// Relay.lock hands it out, so a method of *state runs with the lock held;
// its timers take the lock through relay.
type state struct {
	*parts
	relay *Relay

	scopes map[string]*scope   // by scope key
	shared *scope              // the scope every stream uses by default
	bound  map[uint64]*binding // streams (by id) and their scopes
	unref  *unrefLRU           // cached resources nothing pins
	seq    uint64              // the last View sequence number
	holds  uint64              // counts the holds of the lock: what one released lingers together (release)
	// rolloutLog keeps the last resolved rollouts for /debug/rollouts.
	rolloutLog []*rollout
	closed     bool
}

// lock locks the relay and hands out what the lock guards; the caller
// unlocks it.
func (r *Relay) lock() *state {
	r.mu.Lock()
	r.st.holds++
	return &r.st
}

// unlock releases the lock that handed out s.
func (s *state) unlock() { s.relay.mu.Unlock() }

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
	creds, err := buildCreds(cfg)
	if err != nil {
		return nil, err
	}
	p := &parts{
		cfg:    cfg,
		log:    log,
		m:      metrics.New(),
		linger: cfg.Upstream.Linger,
		node:   relayNode(cfg, newInstance()),
		creds:  creds,
		fan:    newFanout(),
	}
	if k := cfg.Keying; k != nil {
		p.groupBy = slices.Sorted(slices.Values(k.GroupBy))
	}
	r := &Relay{parts: p}
	r.st = state{parts: p, relay: r, scopes: make(map[string]*scope), bound: make(map[uint64]*binding),
		unref: newUnrefLRU(cfg.Cache.MaxUnreferenced)}
	r.life, r.endLife = context.WithCancel(context.Background())
	r.m.BuildInfo.WithLabelValues(Version, runtime.Version()).Set(1)
	r.m.CollectUpstreamConnected(r.upstreamConnected)
	r.m.CollectUpstreamFallback(r.upstreamFallback)
	r.m.CollectCache(r.cacheSizes)
	r.m.CollectReadiness(r.Ready, r.synced.Load)
	// Before any upstream client: one that answers (or a sync timer that
	// fires) while New still runs sets the health status.
	r.health = health.NewServer()
	r.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) // until Serve (updateHealth)

	s := r.lock()
	s.shared = s.newScope("", r.node, false)
	s.unlock()
	if p := cfg.Cache.PersistPath; p != "" {
		r.loadPersisted(p)
		s := r.lock()
		r.warm.Store(s.cachedShared() > 0)
		s.unlock()
		r.persist = newPersister(p, cfg.Cache.PersistInterval, log.Named("persist"), r.m, r.currentCache)
	}

	lim := cfg.Limits
	r.ds = downstream.NewServer(r, downstream.Options{
		MaxNamesPerRequest:  lim.MaxNamesPerRequest,
		MaxSubscriptions:    lim.MaxSubscriptionsPerStream,
		NewStreamsPerSecond: lim.NewStreamsPerSecond,
		Authorize:           authz.New(cfg.Authorization),
		NodeParameters:      nodeParameters(cfg.Keying),
		Logger:              log.Named("downstream"),
		Metrics:             r.m,
		// The relay's own wait for a name's word (does_not_exist_after,
		// then once more on a new stream: askUpstream), and a second for
		// the new stream and the word to reach the client's stream.
		AnswerWait: 2*cfg.Upstream.DoesNotExistAfter + time.Second,
		MoveWait:   cfg.Upstream.MoveWait,
	})
	r.m.CollectSync(r.ds.SyncCounts)
	r.m.CollectConnections(r.ds.OpenConns)
	ka := keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}
	if lim.MaxConnectionAge > 0 {
		// grpc adds ±10% jitter, so clients of a fleet do not reconnect at once.
		ka.MaxConnectionAge, ka.MaxConnectionAgeGrace = lim.MaxConnectionAge, 30*time.Second
	}
	opts := append(r.ds.GRPCOptions(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: lim.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(ka),
	)
	if n := lim.MaxStreamsPerConnection; n > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(n)))
	}
	if n := cfg.Limits.MaxRecvMessageBytes; n > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(n))
	}
	if creds.downstream != nil {
		opts = append(opts, grpc.Creds(creds.downstream))
	}
	r.grpc = grpc.NewServer(opts...)
	r.ds.Register(r.grpc)
	healthpb.RegisterHealthServer(r.grpc, r.health)
	if cfg.Channelz {
		channelz.RegisterChannelzServiceToServer(r.grpc)
	}
	if err := r.newDialects(); err != nil {
		r.abandon()
		return nil, err
	}
	return r, nil
}

// abandon stops what New started, for a New that fails late.
func (r *Relay) abandon() {
	s := r.lock()
	s.closed = true
	clients := s.stopScope(s.shared)
	s.unlock()
	for _, c := range clients {
		c.Close()
	}
	r.fan.close()
	if r.persist != nil {
		r.persist.close()
	}
	r.creds.close()
}

// instanceKey is the node metadata key under which the relay presents
// upstream an id of its own process, so that a stream from the relay to
// itself (an upstream server list that reaches the relay) is recognised and
// refused (Bind) whatever the configured node ids.
const instanceKey = "xds_relay_instance"

// relayNode is the node the relay presents upstream: its own, from config,
// with instance, the id of this process, in its metadata.
func relayNode(cfg *config.Config, instance string) *corev3.Node {
	n := &corev3.Node{
		Id:                   cfg.Node.ID,
		Cluster:              cfg.Node.Cluster,
		UserAgentName:        "xds-relay",
		UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: Version},
		// xDS TTL: the relay keeps TTLs and passes them and heartbeats on.
		ClientFeatures: []string{"xds.config.supports-resource-ttl", "xds.config.supports-resource-in-sotw"},
	}
	if n.Id == "" {
		n.Id = "xds-relay"
	}
	fields := make(map[string]any, len(cfg.Node.Metadata)+1)
	for k, v := range cfg.Node.Metadata {
		fields[k] = v
	}
	fields[instanceKey] = instance
	if md, err := structpb.NewStruct(fields); err == nil {
		n.Metadata = md
	}
	return n
}

// newInstance returns a random id for this process (instanceKey).
func newInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newClient creates the upstream client of auth over servers, with the
// credentials built for them.
func (r *Relay) newClient(sc *scope, auth string, servers []config.Server) *upstream.Client {
	h := &upstreamHandler{r: r, sc: sc, authority: auth}
	creds := r.creds.upstream[auth]
	if auth != "" && len(r.cfg.Upstream.Authorities[auth].XDSServers) == 0 {
		creds = r.creds.upstream[""]
	}
	cfgs := make([]upstream.ServerConfig, len(servers))
	uris := make([]string, len(servers))
	for i, s := range servers {
		uris[i] = s.ServerURI
		cfgs[i] = upstream.ServerConfig{URI: s.ServerURI, Mode: protocolMode(s.Protocol)}
		if i < len(creds) {
			cfgs[i].Creds, cfgs[i].CallCreds = creds[i].transport, creds[i].calls
		}
	}
	r.m.InitUpstream(auth, uris, []string{upstream.ResyncDoesNotExist, upstream.ResyncWildcard, upstream.ResyncGlob, upstream.ResyncRejected})
	log := r.log.Named("upstream") // the client adds the authority
	if sc.key != "" {
		log = log.With(zap.String("scope", sc.key))
	}
	return upstream.New(upstream.Config{
		Authority: auth,
		Servers:   cfgs,
		Node:      sc.node,
		Mode:      upstream.ModeAuto,
		// The shared scope's default servers are dialled at once, so that
		// readiness and xds_relay_upstream_connected know whether the
		// control plane is reachable before the first client arrives.
		Eager:  sc.key == "" && auth == "",
		Logger: log,
		// Delta: tell the server which versions the cache already holds, so
		// that a reconnect does not resend them.
		InitialVersions: h.initialVersions,
		Declared:        h.declared,
		// A new stream asks for the upstream's word at most once per
		// does-not-exist wait (upstream/resync.go).
		ResyncAfter: r.cfg.Upstream.DoesNotExistAfter,
		OnResync: func(reason string) {
			r.m.UpstreamResyncs.WithLabelValues(auth, reason).Inc()
		},
		OnPanic: func(typeURL string) {
			r.m.UpstreamApplyPanics.WithLabelValues(auth, metrics.TypeLabel(typeURL)).Inc()
		},
		OnNACK: func(typeURL string) {
			r.m.UpstreamResponses.WithLabelValues(auth, metrics.TypeLabel(typeURL), metrics.ResultNACK).Inc()
		},
	}, syncHook{h})
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

// Registry is the relay's own Prometheus registry.
func (r *Relay) Registry() *prometheus.Registry { return r.m.Registry }

// Config is the configuration the relay runs with. Callers must not modify it.
func (r *Relay) Config() *config.Config { return r.cfg }

// Logger is the relay's logger; the admin API logs through it.
func (r *Relay) Logger() *zap.Logger { return r.log }
