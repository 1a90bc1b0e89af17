package main

import (
	"fmt"
	"slices"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

var hcmTypeURL = "type.googleapis.com/" + string((&hcmv3.HttpConnectionManager{}).ProtoReflect().Descriptor().FullName())

// peekName returns field 1 of a serialized resource without decoding the rest
// or copying: the name of a Listener, RouteConfiguration or Cluster and the
// cluster_name of a ClusterLoadAssignment.
func peekName(b []byte) ([]byte, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			return v, true
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
	}
	return nil, false
}

// decodeResource decodes a serialized resource of kind k and returns its name,
// the names it references (RDS names of a listener; cluster names of a route
// configuration; EDS service names of an EDS cluster) and its creation stamp.
func decodeResource(k fleet.Kind, b []byte) (name string, refs []string, stamp int64, err error) {
	var m proto.Message
	switch k {
	case fleet.Listeners:
		l := &listenerv3.Listener{}
		if err = proto.Unmarshal(b, l); err != nil {
			break
		}
		m, name, refs = l, l.GetName(), listenerRefs(l)
	case fleet.Routes:
		r := &routev3.RouteConfiguration{}
		if err = proto.Unmarshal(b, r); err != nil {
			break
		}
		m, name, refs = r, r.GetName(), routeRefs(r)
	case fleet.Clusters:
		c := &clusterv3.Cluster{}
		if err = proto.Unmarshal(b, c); err != nil {
			break
		}
		m, name = c, c.GetName()
		if c.GetType() == clusterv3.Cluster_EDS {
			svc := c.GetEdsClusterConfig().GetServiceName()
			if svc == "" {
				svc = c.GetName()
			}
			refs = []string{svc}
		}
	case fleet.Endpoints:
		e := &endpointv3.ClusterLoadAssignment{}
		if err = proto.Unmarshal(b, e); err != nil {
			break
		}
		m, name = e, e.GetClusterName()
	default:
		err = fmt.Errorf("unsupported kind %v", k)
	}
	if err != nil {
		return "", nil, 0, fmt.Errorf("loadgen: decode %v: %w", k, err)
	}
	stamp, _ = fleet.CreatedUnixNano(m)
	return name, refs, stamp, nil
}

// listenerRefs returns the RDS route configuration names of every
// HttpConnectionManager of a listener: the api_listener (proxyless gRPC) and the
// network filters of every filter chain (Envoy). Inline route configurations
// are not followed.
func listenerRefs(l *listenerv3.Listener) []string {
	var refs []string
	add := func(a *anypb.Any) {
		if a.GetTypeUrl() != hcmTypeURL {
			return
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if a.UnmarshalTo(hcm) != nil {
			return
		}
		if n := hcm.GetRds().GetRouteConfigName(); n != "" && !slices.Contains(refs, n) {
			refs = append(refs, n)
		}
	}
	add(l.GetApiListener().GetApiListener())
	chains := l.GetFilterChains()
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(slices.Clip(chains), dc)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			add(f.GetTypedConfig())
		}
	}
	return refs
}

// routeRefs returns the cluster names a route configuration routes to.
func routeRefs(r *routev3.RouteConfiguration) []string {
	var refs []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			refs = append(refs, n)
		}
	}
	for _, vh := range r.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			a := rt.GetRoute()
			add(a.GetCluster())
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				add(wc.GetName())
			}
		}
	}
	return refs
}

// decoded is what the load generator needs from one serialized resource. It is
// immutable and shared by every client that received the same bytes.
type decoded struct {
	name  string
	refs  []string
	stamp int64
}

type decodeKey struct {
	kind fleet.Kind
	hash uint64
	size int
}

// decodeCache decodes each distinct serialized resource once for all clients:
// they all receive the same bytes. Two generations bound its size: when the
// current map is full it becomes the old one, and hits in the old one move back.
// Safe for concurrent use.
type decodeCache struct {
	limit int // entries per generation; set at creation

	mu       sync.Mutex
	cur, old map[decodeKey]*decoded // guarded by mu
}

func newDecodeCache(limit int) *decodeCache {
	return &decodeCache{limit: limit, cur: map[decodeKey]*decoded{}}
}

// get returns the decoded form of b, a resource of kind k whose hash is h.
func (c *decodeCache) get(k fleet.Kind, h uint64, b []byte) (*decoded, error) {
	key := decodeKey{kind: k, hash: h, size: len(b)}
	c.mu.Lock()
	d, ok := c.cur[key]
	if !ok {
		if d, ok = c.old[key]; ok {
			c.put(key, d)
		}
	}
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	// Decode outside the lock; two clients may race to decode the same bytes, which is harmless.
	name, refs, stamp, err := decodeResource(k, b)
	if err != nil {
		return nil, err
	}
	d = &decoded{name: name, refs: refs, stamp: stamp}
	c.mu.Lock()
	c.put(key, d)
	c.mu.Unlock()
	return d, nil
}

// put adds an entry to the current generation; called with mu held.
func (c *decodeCache) put(key decodeKey, d *decoded) {
	if len(c.cur) >= c.limit {
		c.old, c.cur = c.cur, make(map[decodeKey]*decoded, c.limit)
	}
	c.cur[key] = d
}
