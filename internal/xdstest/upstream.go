package xdstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionservice "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/config"
	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
)

// DefaultKey is the snapshot key every node maps to unless the Upstream was
// started with KeyByCluster or WithNodeHash. SetResources writes it.
const DefaultKey = "default"

// Resources is a snapshot's content: resources by type URL (the resource.*Type
// constants of go-control-plane). Types left out are empty.
type Resources = map[resource.Type][]types.Resource

// UpstreamOption configures StartUpstream.
type UpstreamOption func(*upstreamOptions)

type upstreamOptions struct {
	log       *zap.Logger
	hash      func(*core.Node) string
	ordered   bool
	creds     credentials.TransportCredentials               // WithTLS; nil: plaintext
	heartbeat time.Duration                                  // WithHeartbeat
	linear    bool                                           // Linear
	sotwOnly  bool                                           // SotWOnly
	ads       discoverygrpc.AggregatedDiscoveryServiceServer // WithADS
	lrs       *LRSUpstream                                   // WithLRS
}

// WithLRS makes the Upstream serve load reporting too, with l (its Addr is
// then the Upstream's).
func WithLRS(l *LRSUpstream) UpstreamOption {
	return func(o *upstreamOptions) { o.lrs = l }
}

// WithHeartbeat makes the Upstream send TTL heartbeats every interval for
// the resources set with a TTL (SetResourcesTTL): go-control-plane's
// heartbeating SnapshotCache, which does it for SotW streams only.
func WithHeartbeat(interval time.Duration) UpstreamOption {
	return func(o *upstreamOptions) { o.heartbeat = interval }
}

// WithLogger makes the Upstream and go-control-plane log to log (at Debug for
// go-control-plane's own messages). Default: zap.NewNop().
func WithLogger(log *zap.Logger) UpstreamOption {
	return func(o *upstreamOptions) { o.log = log }
}

// KeyByCluster keys snapshots by the node's cluster instead of mapping every
// node to DefaultKey: SetSnapshot(cluster, ...) then serves that cluster only.
func KeyByCluster() UpstreamOption {
	return WithNodeHash(func(n *core.Node) string { return n.GetCluster() })
}

// WithNodeHash keys snapshots by hash(node).
func WithNodeHash(hash func(*core.Node) string) UpstreamOption {
	return func(o *upstreamOptions) { o.hash = hash }
}

// Ordered makes the Upstream order SotW ADS responses the way xDS asks
// (CDS, EDS, LDS, RDS: go-control-plane's ADS mode and WithOrderedADS).
// Caveat of go-control-plane's ADS mode: a named request is answered only when
// it names every resource of that type in the snapshot.
func Ordered() UpstreamOption {
	return func(o *upstreamOptions) { o.ordered = true }
}

// SotWOnly makes the Upstream offer only the SotW ADS method, as a server
// does that predates Delta: Delta streams are answered with
// codes.Unimplemented.
func SotWOnly() UpstreamOption {
	return func(o *upstreamOptions) { o.sotwOnly = true }
}

// WithADS makes the Upstream serve ads as its only service instead of
// go-control-plane's, for responses go-control-plane cannot produce. Requests
// and streams are recorded and Stop and Restart work as usual; responses are
// not recorded, and the snapshot methods do not apply.
func WithADS(ads discoverygrpc.AggregatedDiscoveryServiceServer) UpstreamOption {
	return func(o *upstreamOptions) { o.ads = ads }
}

// nodeHash adapts a function to go-control-plane's cache.NodeHash.
type nodeHash func(*core.Node) string

func (h nodeHash) ID(n *core.Node) string { return h(n) }

// Upstream is an authoritative xDS server for tests: go-control-plane's
// server (ADS SotW and Delta plus every per-type service) over a
// SnapshotCache (or per-type LinearCaches with Linear, or the test's own ADS
// with WithADS), listening on 127.0.0.1. It records every request exactly as
// received (before go-control-plane fills in the stream's node) and every
// response it sends, counts streams, and can be stopped and restarted on the
// same port with its snapshots intact.
type Upstream struct {
	// Set at creation, read-only.
	tb       testing.TB
	log      *zap.Logger
	cache    cache.SnapshotCache
	addr     string
	ordered  bool
	creds    credentials.TransportCredentials               // nil: plaintext
	served   cache.Cache                                    // what go-control-plane serves: cache, or the Linear caches
	linear   map[resource.Type]*cache.LinearCache           // Linear; nil otherwise
	sotwOnly bool                                           // SotWOnly
	ads      discoverygrpc.AggregatedDiscoveryServiceServer // WithADS; nil: go-control-plane's
	lrs      *LRSUpstream                                   // WithLRS; nil: no load reporting

	// snapMu serialises snapshot updates (SetSnapshot*). Lock order: snapMu
	// before mu.
	snapMu   sync.Mutex
	gen      int                                 // last generation handed out
	contents map[string]Resources                // by key: the last content set
	versions map[string]map[resource.Type]string // by key: each type's version

	// mu guards the server lifecycle and the recordings. It is never held
	// while calling into grpc or go-control-plane.
	mu         sync.Mutex
	srv        *grpc.Server
	cancel     context.CancelFunc // cancels the go-control-plane server's context
	serveDone  chan struct{}      // closed when srv.Serve returns
	nextStream int64
	gcpStreams map[gcpStream]int64 // go-control-plane stream id → our stream id
	requests   []Request
	responses  []Response
	open       int
	total      int
	changed    chan struct{} // closed and replaced on every recorded event
}

// gcpStream names a go-control-plane stream: SotW and Delta number their
// streams independently.
type gcpStream struct {
	delta bool
	id    int64
}

// StartUpstream starts an Upstream on 127.0.0.1:0. It is stopped when the
// test ends.
func StartUpstream(tb testing.TB, opts ...UpstreamOption) *Upstream {
	tb.Helper()
	o := upstreamOptions{log: zap.NewNop(), hash: func(*core.Node) string { return DefaultKey }}
	for _, opt := range opts {
		opt(&o)
	}
	u := &Upstream{
		tb:         tb,
		log:        o.log.Named("xdstest.upstream"),
		contents:   map[string]Resources{},
		versions:   map[string]map[resource.Type]string{},
		gcpStreams: map[gcpStream]int64{},
		changed:    make(chan struct{}),
	}
	u.ordered = o.ordered
	u.creds = o.creds
	u.sotwOnly, u.ads, u.lrs = o.sotwOnly, o.ads, o.lrs
	if o.heartbeat > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		tb.Cleanup(cancel) // after Stop: the heartbeat goroutine ends
		u.cache = cache.NewSnapshotCacheWithHeartbeating(ctx, o.ordered, nodeHash(o.hash), gcpLogger(u.log), o.heartbeat)
	} else {
		u.cache = cache.NewSnapshotCache(o.ordered, nodeHash(o.hash), gcpLogger(u.log))
	}
	u.served = wildcardCache{u.cache}
	if o.linear {
		u.served, u.linear = newLinear()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("xdstest: upstream listen: %v", err)
	}
	u.addr = lis.Addr().String()
	if u.lrs != nil {
		u.lrs.init(u.addr)
	}
	u.serve(lis)
	tb.Cleanup(u.Stop)
	tb.Cleanup(u.forget)
	return u
}

// Addr is the server's host:port; it stays the same across Restart.
func (u *Upstream) Addr() string { return u.addr }

// Cache is the SnapshotCache behind the server, for anything the helpers
// below do not cover.
func (u *Upstream) Cache() cache.SnapshotCache { return u.cache }

// serve starts a new grpc.Server with a fresh go-control-plane server on lis.
func (u *Upstream) serve(lis net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	gl := gcpLogger(u.log)
	cbs := xdsserver.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			u.mapStream(ctx, gcpStream{id: id})
			return nil
		},
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			u.mapStream(ctx, gcpStream{delta: true, id: id})
			return nil
		},
		StreamClosedFunc:      func(id int64, _ *core.Node) { u.unmapStream(gcpStream{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { u.unmapStream(gcpStream{delta: true, id: id}) },
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoverygrpc.DiscoveryRequest, resp *discoverygrpc.DiscoveryResponse) {
			u.recordResponse(gcpStream{id: id}, Response{SotW: proto.Clone(resp).(*discoverygrpc.DiscoveryResponse)})
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoverygrpc.DeltaDiscoveryRequest, resp *discoverygrpc.DeltaDiscoveryResponse) {
			u.recordResponse(gcpStream{delta: true, id: id}, Response{Delta: proto.Clone(resp).(*discoverygrpc.DeltaDiscoveryResponse)})
		},
	}
	sotwOpts := []config.XDSOption{sotw.WithLogger(gl)}
	if u.ordered {
		sotwOpts = append(sotwOpts, sotw.WithOrderedADS())
	}
	c := u.served
	xds := xdsserver.NewServerAdvanced(
		rest.NewServer(c, cbs),
		sotw.NewServer(ctx, c, cbs, sotwOpts...),
		delta.NewServer(ctx, c, cbs, delta.WithLogger(gl)),
	)
	opts := []grpc.ServerOption{
		grpc.StreamInterceptor(u.intercept),
		grpc.WaitForHandlers(true),
		// Be lenient with clients' keepalive pings: a relay may ping often.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if u.creds != nil {
		opts = append(opts, grpc.Creds(u.creds))
	}
	srv := grpc.NewServer(opts...)
	u.register(srv, xds)

	done := make(chan struct{})
	u.mu.Lock()
	u.srv, u.cancel, u.serveDone = srv, cancel, done
	u.mu.Unlock()
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil {
			u.log.Debug("serve ended", zap.Error(err))
		}
	}()
	u.log.Info("upstream serving", zap.String("addr", u.addr))
}

// register registers go-control-plane's xds for every xDS service, only its
// SotW ADS method (SotWOnly), or the test's own ADS (WithADS).
func (u *Upstream) register(srv *grpc.Server, xds xdsserver.Server) {
	if u.lrs != nil {
		lrsv3.RegisterLoadReportingServiceServer(srv, u.lrs)
	}
	switch {
	case u.ads != nil:
		discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, u.ads)
		return
	case u.sotwOnly:
		discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, sotwOnlyADS{xds: xds})
		return
	}
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(srv, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(srv, xds)
	routeservice.RegisterScopedRoutesDiscoveryServiceServer(srv, xds)
	routeservice.RegisterVirtualHostDiscoveryServiceServer(srv, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(srv, xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(srv, xds)
	secretservice.RegisterSecretDiscoveryServiceServer(srv, xds)
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(srv, xds)
	extensionservice.RegisterExtensionConfigDiscoveryServiceServer(srv, xds)
}

// sotwOnlyADS is go-control-plane's ADS without DeltaAggregatedResources.
type sotwOnlyADS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	xds xdsserver.Server
}

func (s sotwOnlyADS) StreamAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return s.xds.StreamAggregatedResources(st)
}

// Stop stops the server: every stream ends (clients see UNAVAILABLE) and the
// port is released. Snapshots and recordings are kept. Stopping a stopped
// Upstream does nothing.
func (u *Upstream) Stop() {
	u.mu.Lock()
	srv, cancel, done := u.srv, u.cancel, u.serveDone
	u.srv, u.cancel, u.serveDone = nil, nil, nil
	u.mu.Unlock()
	if srv == nil {
		return
	}
	cancel()
	srv.Stop()
	<-done
	u.log.Info("upstream stopped", zap.String("addr", u.addr))
}

// Restart stops the server if it runs and serves again on the same address,
// with the same snapshots. The port is re-bound within WaitTimeout or the
// test fails.
func (u *Upstream) Restart() {
	u.tb.Helper()
	u.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	var lc net.ListenConfig
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		lis, err := lc.Listen(ctx, "tcp", u.addr)
		if err == nil {
			u.serve(lis)
			return
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			u.tb.Fatalf("xdstest: upstream restart on %s: %v", u.addr, err)
		}
		select {
		case <-ctx.Done():
			u.tb.Fatalf("xdstest: upstream restart: %s still in use after %v", u.addr, WaitTimeout)
		case <-tick.C: // the old socket may linger briefly; poll for it
		}
	}
}

// SetResources sets the DefaultKey snapshot; see SetSnapshot.
func (u *Upstream) SetResources(res Resources) string {
	u.tb.Helper()
	return u.SetSnapshot(DefaultKey, res)
}

// SetSnapshot replaces the snapshot of key with res and pushes it to the
// watching streams. Only the types whose content changed get a new version
// (`v<N>`, N counting every SetSnapshot of this Upstream), so a client sees
// no response for a type that did not change. It returns the new version.
func (u *Upstream) SetSnapshot(key string, res Resources) string {
	u.tb.Helper()
	return u.setSnapshot(key, res, nil)
}

// SetResourcesTTL sets the DefaultKey snapshot like SetResources, the
// resources named in ttls with that TTL (xDS TTL: sent wrapped in a
// Resource with its ttl; heartbeats with WithHeartbeat).
func (u *Upstream) SetResourcesTTL(res Resources, ttls map[string]time.Duration) string {
	u.tb.Helper()
	return u.setSnapshot(DefaultKey, res, ttls)
}

func (u *Upstream) setSnapshot(key string, res Resources, ttls map[string]time.Duration) string {
	u.tb.Helper()
	u.mustSnapshot()
	u.snapMu.Lock()
	defer u.snapMu.Unlock()
	u.gen++
	version := fmt.Sprintf("v%d", u.gen)
	old := u.contents[key]
	versions := u.versions[key]
	if versions == nil {
		versions = map[resource.Type]string{}
	}
	snap := &cache.Snapshot{}
	for i := types.ResponseType(0); i < types.UnknownType; i++ {
		typeURL, err := cache.GetResponseTypeURL(i)
		if err != nil {
			u.tb.Fatalf("xdstest: %v", err)
		}
		if !sameResources(old[typeURL], res[typeURL]) || versions[typeURL] == "" || len(ttls) > 0 {
			versions[typeURL] = version
		}
		items := make([]types.ResourceWithTTL, 0, len(res[typeURL]))
		for _, r := range res[typeURL] {
			item := types.ResourceWithTTL{Resource: r}
			if ttl, ok := ttls[cache.GetResourceName(r)]; ok {
				item.TTL = &ttl
			}
			items = append(items, item)
		}
		snap.Resources[i] = cache.NewResourcesWithTTL(versions[typeURL], items)
	}
	for typeURL := range res {
		if cache.GetResponseType(typeURL) == types.UnknownType {
			u.tb.Fatalf("xdstest: SetSnapshot: go-control-plane's cache cannot serve type %q", typeURL)
		}
	}
	// The ledger learns what is served before any client can see it: a
	// removal forwarded at once must find the name already gone.
	u.contents[key] = res
	u.versions[key] = versions
	u.record()
	u.set(key, snap)
	return version
}

// SetSnapshotVersion replaces the snapshot of key with res, every type at
// version, changed or not (to test how a change of version alone is handled).
func (u *Upstream) SetSnapshotVersion(key, version string, res Resources) {
	u.tb.Helper()
	u.mustSnapshot()
	u.snapMu.Lock()
	defer u.snapMu.Unlock()
	snap, err := cache.NewSnapshot(version, res)
	if err != nil {
		u.tb.Fatalf("xdstest: SetSnapshotVersion: %v", err)
	}
	versions := map[resource.Type]string{}
	for i := types.ResponseType(0); i < types.UnknownType; i++ {
		typeURL, _ := cache.GetResponseTypeURL(i)
		versions[typeURL] = version
	}
	u.contents[key] = res
	u.versions[key] = versions
	u.record() // before any client can see it (see setSnapshot)
	u.set(key, snap)
}

// mustSnapshot fails the test if u does not serve its SnapshotCache: a
// snapshot set there would reach no client.
func (u *Upstream) mustSnapshot() {
	u.tb.Helper()
	if u.linear != nil || u.ads != nil {
		u.tb.Fatalf("xdstest: a snapshot set on an Upstream started with Linear or WithADS")
	}
}

func (u *Upstream) set(key string, snap *cache.Snapshot) {
	u.tb.Helper()
	if err := u.cache.SetSnapshot(context.Background(), key, snap); err != nil {
		u.tb.Fatalf("xdstest: SetSnapshot(%q): %v", key, err)
	}
}

// sameResources reports whether a and b hold the same named resources with
// equal contents, in any order.
func sameResources(a, b []types.Resource) bool {
	if len(a) != len(b) {
		return false
	}
	byName := make(map[string]types.Resource, len(a))
	for _, r := range a {
		byName[cache.GetResourceName(r)] = r
	}
	for _, r := range b {
		o, ok := byName[cache.GetResourceName(r)]
		if !ok || !proto.Equal(o, r) {
			return false
		}
	}
	return true
}

// wildcardCache fixes go-control-plane v0.14's SnapshotCache for explicit
// SotW wildcards: it filters responses by the request's resource_names, so a
// request for "*" got no resources. A wildcard subscription is passed on as
// a request without names (which the cache answers with everything).
type wildcardCache struct {
	cache.SnapshotCache
}

func (w wildcardCache) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	if sub.IsWildcard() && len(req.GetResourceNames()) > 0 {
		req = proto.Clone(req).(*discoverygrpc.DiscoveryRequest)
		req.ResourceNames = nil
	}
	return w.SnapshotCache.CreateWatch(req, sub, ch)
}

// gcpLogger sends go-control-plane's log lines to log at Debug (its Info is
// per request), Warn and Error.
func gcpLogger(log *zap.Logger) gcplog.Logger {
	s := log.Named("go-control-plane").Sugar()
	return gcplog.LoggerFuncs{
		DebugFunc: s.Debugf,
		InfoFunc:  s.Debugf,
		WarnFunc:  s.Warnf,
		ErrorFunc: s.Errorf,
	}
}
