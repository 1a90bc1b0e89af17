package xdstest

import (
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// linearTypes are the types a Linear Upstream serves.
var linearTypes = []resource.Type{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// Linear makes the Upstream serve from one go-control-plane LinearCache per
// type (clusters, endpoints, listeners, routes) instead of its SnapshotCache:
// resources are set and deleted one at a time (UpdateResources,
// DeleteResources), each with its own version, as by a server that tracks
// resources rather than snapshots. The snapshot methods do not apply, and
// the ledger does not see what a Linear Upstream serves.
func Linear() UpstreamOption {
	return func(o *upstreamOptions) { o.linear = true }
}

// newLinear returns the caches of a Linear Upstream and the cache that
// serves them by type.
func newLinear() (*cache.MuxCache, map[resource.Type]*cache.LinearCache) {
	mux := &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cache.Cache{},
	}
	caches := map[resource.Type]*cache.LinearCache{}
	for _, typ := range linearTypes {
		lc := cache.NewLinearCache(typ)
		caches[typ] = lc
		mux.Caches[typ] = lc
	}
	return mux, caches
}

// UpdateResources creates or replaces res of typeURL on a Linear Upstream.
func (u *Upstream) UpdateResources(typeURL resource.Type, res ...types.Resource) {
	u.tb.Helper()
	m := make(map[string]types.Resource, len(res))
	for _, r := range res {
		m[cache.GetResourceName(r)] = r
	}
	if err := u.LinearCache(typeURL).UpdateResources(m, nil); err != nil {
		u.tb.Fatalf("xdstest: update %s: %v", typeURL, err)
	}
}

// DeleteResources deletes names of typeURL on a Linear Upstream.
func (u *Upstream) DeleteResources(typeURL resource.Type, names ...string) {
	u.tb.Helper()
	if err := u.LinearCache(typeURL).UpdateResources(nil, names); err != nil {
		u.tb.Fatalf("xdstest: delete %s: %v", typeURL, err)
	}
}

// LinearCache is the cache of typeURL on a Linear Upstream, for what the
// helpers do not cover (its watches, say: the Upstream records a request
// before go-control-plane has processed it).
func (u *Upstream) LinearCache(typeURL resource.Type) *cache.LinearCache {
	u.tb.Helper()
	lc := u.linear[typeURL]
	if lc == nil {
		u.tb.Fatalf("xdstest: no LinearCache for %s (an Upstream started with Linear serves %v)", typeURL, linearTypes)
	}
	return lc
}
