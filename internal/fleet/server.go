package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/tp2"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Spec is the fleet to serve; it must be valid.
	Spec Spec
	// Churn is the rate of changes; 0 means no churn.
	Churn Rate
	// ChurnKinds are the kinds changed in turn, one kind per change; empty means [Endpoints].
	ChurnKinds []Kind
	// ChurnCount is the number of resources per change (capped at the kind's count); 0 means 1.
	ChurnCount int
	// Variants, when set, serves every resource as xRFC TP2 variants, one
	// per value, through a TP2-capable server (internal/tp2) instead of
	// go-control-plane's: clients must subscribe by name (no wildcard), and
	// each gets the variant its dynamic parameters select.
	Variants Variants
	// LoadReportInterval, when positive, serves load reporting
	// (envoy.service.load_stats.v3) too: every stream is asked for all
	// clusters at this interval, and what arrives is counted (LoadStats).
	LoadReportInterval time.Duration
	// Logger receives a startup line at Info and one line per change at Debug;
	// nil means zap.NewNop().
	Logger *zap.Logger
}

// Change describes one churn step.
type Change struct {
	// Seq numbers the changes from 1.
	Seq uint64
	// Kind is the kind of every changed resource.
	Kind Kind
	// Names are the changed resources.
	Names []string
	// Created is the creation stamp written into every changed resource.
	Created time.Time
}

// Server is a small authoritative xDS control plane serving a Spec over ADS
// (SotW and Delta) and the per-type LDS/RDS/CDS/EDS services, with optional churn.
// All methods are safe for concurrent use.
type Server struct {
	// Set at creation, read-only.
	cfg    ServerConfig
	log    *zap.Logger
	caches map[string]*cachev3.LinearCache // by type URL; nil with Variants
	cache  *demoCache
	tp2    *tp2.Server // with Variants
	lrs    *lrsSink    // with LoadReportInterval

	// Guarded by mu.
	mu     sync.Mutex
	seq    uint64
	cursor [numKinds]int // next resource index to change, per kind
	served bool
}

// NewServer builds the initial resources of cfg.Spec, all stamped with the current time.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Spec.Style == "" {
		cfg.Spec.Style = StyleEnvoy
	}
	if cfg.Churn < 0 {
		return nil, fmt.Errorf("fleet: negative churn rate %v", cfg.Churn)
	}
	if len(cfg.ChurnKinds) == 0 {
		cfg.ChurnKinds = []Kind{Endpoints}
	}
	for _, k := range cfg.ChurnKinds {
		if k < 0 || k >= numKinds {
			return nil, fmt.Errorf("fleet: invalid churn kind %d", k)
		}
	}
	if cfg.ChurnCount < 0 {
		return nil, fmt.Errorf("fleet: negative churn count %d", cfg.ChurnCount)
	}
	if cfg.ChurnCount == 0 {
		cfg.ChurnCount = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if err := cfg.Variants.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, caches: map[string]*cachev3.LinearCache{}}
	if cfg.LoadReportInterval > 0 {
		s.lrs = newLRSSink(cfg)
	}
	now := time.Now()
	if len(cfg.Variants.Values) > 0 {
		s.tp2 = tp2.New()
		for _, k := range Kinds {
			all := make([]int, cfg.Spec.Count(k))
			for i := range all {
				all[i] = i
			}
			if err := s.publishLocked(k, all, now); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	// A per-process version prefix, so that versions from an earlier run are never taken for current ones.
	prefix := strconv.FormatInt(now.UnixNano(), 36) + "-"
	glog := gcpLogger{s: s.log.Named("gcp").Sugar()}
	for _, k := range Kinds {
		initial := make(map[string]types.Resource, cfg.Spec.Count(k))
		for i := range cfg.Spec.Count(k) {
			initial[cfg.Spec.Name(k, i)] = cfg.Spec.Resource(k, i, now)
		}
		s.caches[k.TypeURL()] = cachev3.NewLinearCache(k.TypeURL(),
			cachev3.WithVersionPrefix(prefix), cachev3.WithInitialResources(initial), cachev3.WithLogger(glog))
	}
	s.cache = &demoCache{caches: s.caches, nackVersion: prefix + "nack"}
	return s, nil
}

// Change regenerates the next ChurnCount resources of the next churn kind with a
// fresh creation stamp and publishes them. The churn loop calls it; tests may too.
func (s *Server) Change() (Change, error) {
	s.mu.Lock()
	k := s.cfg.ChurnKinds[s.seq%uint64(len(s.cfg.ChurnKinds))]
	s.mu.Unlock()
	return s.ChangeKind(k, s.cfg.ChurnCount)
}

// publishLocked publishes resources (by index) of kind k stamped with
// created: into the kind's LinearCache, or as every TP2 variant of each.
// Called with mu held.
func (s *Server) publishLocked(k Kind, indices []int, created time.Time) error {
	if s.tp2 != nil {
		return s.tp2.Apply(k.TypeURL(), nil, s.variantsOf(k, indices, created))
	}
	update := make(map[string]types.Resource, len(indices))
	for _, i := range indices {
		update[s.cfg.Spec.Name(k, i)] = s.cfg.Spec.Resource(k, i, created)
	}
	return s.caches[k.TypeURL()].UpdateResources(update, nil)
}

// Changes returns the number of changes made so far.
func (s *Server) Changes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// Serve serves xDS on lis and churns until ctx is done, then stops the gRPC
// server (closing every stream) and returns nil; it returns an error when lis
// fails. Serve may be called once; it closes lis.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		return errors.New("fleet: Serve called twice")
	}
	s.served = true
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	glog := gcpLogger{s: s.log.Named("gcp").Sugar()}
	xds := serverv3.NewServer(ctx, s.cache, nil, sotwv3.WithLogger(glog))
	gs := grpc.NewServer(
		grpc.WaitForHandlers(true),
		// Many small streams: keep per-connection buffers small.
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(16<<10),
		grpc.WriteBufferSize(16<<10),
		grpc.MaxConcurrentStreams(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	if s.lrs != nil {
		lrsv3.RegisterLoadReportingServiceServer(gs, s.lrs)
	}
	if s.tp2 != nil {
		s.tp2.Register(gs) // ADS only
	} else {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, xds)
		listenerservice.RegisterListenerDiscoveryServiceServer(gs, xds)
		routeservice.RegisterRouteDiscoveryServiceServer(gs, xds)
		clusterservice.RegisterClusterDiscoveryServiceServer(gs, xds)
		endpointservice.RegisterEndpointDiscoveryServiceServer(gs, xds)
	}

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	var wg sync.WaitGroup
	if iv := s.cfg.Churn.Interval(); iv > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.churn(ctx, iv)
		}()
	}
	spec := s.cfg.Spec
	kinds := make([]string, len(s.cfg.ChurnKinds))
	for i, k := range s.cfg.ChurnKinds {
		kinds[i] = k.String()
	}
	s.log.Info("xds-democp serving", zap.String("listen", lis.Addr().String()), zap.String("style", string(spec.Style)),
		zap.Int("listeners", spec.Listeners), zap.Int("routes", spec.Routes), zap.Int("clusters", spec.Clusters),
		zap.Int("endpoints_per_cluster", spec.EndpointsPerCluster), zap.Stringer("churn", s.cfg.Churn),
		zap.Strings("churn_types", kinds), zap.Int("churn_count", s.cfg.ChurnCount))

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	gs.Stop()
	wg.Wait()
	if err == nil {
		err = <-errc
	}
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("fleet: serve: %w", err)
	}
	return nil
}

func (s *Server) churn(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Change(); err != nil {
				s.log.Warn("churn", zap.Error(err))
			}
		}
	}
}

// demoCache sends each request to the LinearCache of its type URL.
type demoCache struct {
	caches      map[string]*cachev3.LinearCache // read-only
	nackVersion string                          // a version with the caches' prefix that no response carries
}

var _ cachev3.Cache = (*demoCache)(nil)

func (c *demoCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	lc, ok := c.caches[req.GetTypeUrl()]
	if !ok {
		// A type this server does not have: never answer, keep the stream open.
		return func() {}, nil
	}
	if req.GetErrorDetail() != nil && req.GetVersionInfo() == "" {
		// xDS: after a NACK do not resend the same version. LinearCache answers every
		// request without a version_info, which a NACK of the first response is; give it
		// one so that it answers only when a resource changes.
		req = proto.Clone(req).(*discoveryv3.DiscoveryRequest)
		req.VersionInfo = c.nackVersion
	}
	return lc.CreateWatch(req, sub, ch)
}

func (c *demoCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	lc, ok := c.caches[req.GetTypeUrl()]
	if !ok {
		return func() {}, nil
	}
	return lc.CreateDeltaWatch(req, sub, ch)
}

func (c *demoCache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("fleet: REST fetch is not supported")
}

// variantsOf returns resources (by index) of kind k stamped with created as
// one TP2 variant per value of s.cfg.Variants: constraint key=value, and the
// value in the resource's stamp metadata.
func (s *Server) variantsOf(k Kind, indices []int, created time.Time) []tp2.Variant {
	vs := s.cfg.Variants
	out := make([]tp2.Variant, 0, len(indices)*len(vs.Values))
	for _, i := range indices {
		for _, v := range vs.Values {
			m := s.cfg.Spec.Resource(k, i, created)
			markVariant(m, vs.Key+"="+v)
			out = append(out, tp2.Variant{Name: s.cfg.Spec.Name(k, i), Constraints: vs.constraint(v), Resource: m})
		}
	}
	return out
}
