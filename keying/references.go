package keying

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Refs are the resources one resource names, by type URL: what a client
// must hold for it to work (xDS "eventual consistency considerations").
type Refs map[string][]string

// References returns what the serialized resource of typeURL (its bytes,
// not an Any) refers to, for the well-known types a relay can read:
//
//	Listener                  → RouteConfiguration (HttpConnectionManager rds, API listeners
//	                            too), Cluster (tcp_proxy, inline routes)
//	RouteConfiguration        → Cluster (route, weighted and mirror clusters)
//	ScopedRouteConfiguration  → RouteConfiguration
//	Cluster                   → ClusterLoadAssignment (EDS clusters)
//
// Names are canonical (Canonical). Any other type, or bytes that do not
// decode, refer to nothing: opaque resources keep the upstream's order only.
func References(typeURL string, b []byte) Refs {
	refs := Refs{}
	add := func(t, name string) {
		if name == "" {
			return
		}
		if c, err := Canonical(name); err == nil {
			name = c
		}
		refs[t] = append(refs[t], name)
	}
	switch typeURL {
	case ListenerType:
		l := &listenerv3.Listener{}
		if proto.Unmarshal(b, l) != nil {
			return nil
		}
		chains := append(l.GetFilterChains(), l.GetDefaultFilterChain())
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				networkFilterRefs(f.GetTypedConfig(), add)
			}
		}
		networkFilterRefs(l.GetApiListener().GetApiListener(), add)
	case RouteType:
		rc := &routev3.RouteConfiguration{}
		if proto.Unmarshal(b, rc) != nil {
			return nil
		}
		routeRefs(rc, add)
	case ScopedRouteType:
		s := &routev3.ScopedRouteConfiguration{}
		if proto.Unmarshal(b, s) != nil {
			return nil
		}
		add(RouteType, s.GetRouteConfigurationName())
	case ClusterType:
		c := &clusterv3.Cluster{}
		if proto.Unmarshal(b, c) != nil {
			return nil
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			eds := c.GetEdsClusterConfig().GetServiceName()
			if eds == "" {
				eds = c.GetName()
			}
			add(EndpointType, eds)
		}
	default:
		return nil
	}
	if len(refs) == 0 {
		return nil
	}
	return refs
}

// networkFilterRefs adds what a listener's network filter (or API listener)
// refers to: an HttpConnectionManager's routes, a TcpProxy's clusters.
func networkFilterRefs(a *anypb.Any, add func(t, name string)) {
	if a == nil {
		return
	}
	switch {
	case a.MessageIs((*hcmv3.HttpConnectionManager)(nil)):
		m := &hcmv3.HttpConnectionManager{}
		if a.UnmarshalTo(m) != nil {
			return
		}
		add(RouteType, m.GetRds().GetRouteConfigName())
		if rc := m.GetRouteConfig(); rc != nil {
			routeRefs(rc, add)
		}
	case a.MessageIs((*tcpv3.TcpProxy)(nil)):
		p := &tcpv3.TcpProxy{}
		if a.UnmarshalTo(p) != nil {
			return
		}
		add(ClusterType, p.GetCluster())
		for _, wc := range p.GetWeightedClusters().GetClusters() {
			add(ClusterType, wc.GetName())
		}
	}
}

// routeRefs adds the clusters a route configuration's routes send to.
func routeRefs(rc *routev3.RouteConfiguration, add func(t, name string)) {
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			ra := r.GetRoute()
			add(ClusterType, ra.GetCluster())
			for _, wc := range ra.GetWeightedClusters().GetClusters() {
				add(ClusterType, wc.GetName())
			}
			for _, m := range ra.GetRequestMirrorPolicies() {
				add(ClusterType, m.GetCluster())
			}
		}
	}
}

// Referrers returns the types whose resources may refer to resources of
// typeURL (References), nil for none.
func Referrers(typeURL string) []string {
	switch typeURL {
	case ClusterType:
		return []string{RouteType, ListenerType}
	case EndpointType:
		return []string{ClusterType}
	case RouteType:
		return []string{ListenerType, ScopedRouteType}
	}
	return nil
}

// Referenced returns the types resources of typeURL may refer to: the
// inverse of Referrers.
func Referenced(typeURL string) []string {
	switch typeURL {
	case ListenerType:
		return []string{RouteType, ClusterType}
	case RouteType:
		return []string{ClusterType}
	case ScopedRouteType:
		return []string{RouteType}
	case ClusterType:
		return []string{EndpointType}
	}
	return nil
}

// OrderRank orders types the way xDS asks updates to go out so that traffic
// never drops ("eventual consistency considerations"): clusters, then
// endpoints, listeners, routes (scoped routes, virtual hosts), then every
// other type.
func OrderRank(typeURL string) int {
	switch typeURL {
	case ClusterType:
		return 0
	case EndpointType:
		return 1
	case ListenerType:
		return 2
	case RouteType, ScopedRouteType:
		return 3
	case VirtualHostType:
		return 4
	}
	return 5
}
