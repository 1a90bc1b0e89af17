package fleet

import (
	"fmt"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Where the creation stamp lives; see the package documentation.
const (
	// StampNamespace is the filter_metadata key holding the stamp.
	StampNamespace = "xds-democp"
	// StampField is the field of the StampNamespace struct holding the decimal Unix nanoseconds.
	StampField = "created_unix_nano"
)

// Stamp returns metadata carrying created as a creation stamp.
func Stamp(created time.Time) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		StampNamespace: {Fields: map[string]*structpb.Value{
			StampField: structpb.NewStringValue(strconv.FormatInt(created.UnixNano(), 10)),
		}},
	}}
}

// stampOf returns the metadata holding the stamp of a generated resource.
func stampOf(m proto.Message) *corev3.Metadata {
	switch r := m.(type) {
	case *listenerv3.Listener:
		return r.GetMetadata()
	case *routev3.RouteConfiguration:
		return r.GetMetadata()
	case *clusterv3.Cluster:
		return r.GetMetadata()
	case *endpointv3.ClusterLoadAssignment:
		if eps := r.GetEndpoints(); len(eps) > 0 && len(eps[0].GetLbEndpoints()) > 0 {
			return eps[0].GetLbEndpoints()[0].GetMetadata()
		}
	}
	return nil
}

// VariantField is the field of the StampNamespace struct naming a TP2
// variant ("key=value"; see ServerConfig.Variants).
const VariantField = "variant"

// markVariant writes the variant into a generated resource's stamp.
func markVariant(m proto.Message, variant string) {
	if st := stampOf(m).GetFilterMetadata()[StampNamespace]; st != nil {
		st.Fields[VariantField] = structpb.NewStringValue(variant)
	}
}

// CreatedUnixNano returns the creation stamp of a generated Listener,
// RouteConfiguration, Cluster or ClusterLoadAssignment, and whether it has one.
func CreatedUnixNano(m proto.Message) (int64, bool) {
	v := stampOf(m).GetFilterMetadata()[StampNamespace].GetFields()[StampField]
	if v == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(v.GetStringValue(), 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Resource returns resource i of kind k, stamped with created.
func (s Spec) Resource(k Kind, i int, created time.Time) proto.Message {
	switch k {
	case Listeners:
		return s.Listener(i, created)
	case Routes:
		return s.RouteConfiguration(i, created)
	case Clusters:
		return s.Cluster(i, created)
	default:
		return s.ClusterLoadAssignment(i, created)
	}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		// Only fails for messages that cannot be marshalled, which the generator never builds.
		panic(fmt.Sprintf("fleet: marshal %T: %v", m, err))
	}
	return a
}

// httpConnectionManager returns the HCM for listener i: RDS over ADS and the router filter.
func (s Spec) httpConnectionManager(i int) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: ListenerName(i),
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: s.Name(Routes, i%s.Routes),
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
}

// Listener returns listener i. StyleEnvoy: a socket listener on 0.0.0.0:(10000+i)
// with an HttpConnectionManager filter; StyleGRPC: an api_listener.
func (s Spec) Listener(i int, created time.Time) *listenerv3.Listener {
	hcm := mustAny(s.httpConnectionManager(i))
	l := &listenerv3.Listener{Name: s.Name(Listeners, i), Metadata: Stamp(created)}
	if s.Style == StyleGRPC {
		l.ApiListener = &listenerv3.ApiListener{ApiListener: hcm}
		return l
	}
	l.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       "0.0.0.0",
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(10000 + i)},
	}}}
	l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name:       "envoy.filters.network.http_connection_manager",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
	}}}}
	return l
}

// RouteConfiguration returns route configuration j: one virtual host for every
// domain, routing "/cluster-k/" to cluster k for each k ≡ j (mod Routes), then
// a default route.
func (s Spec) RouteConfiguration(j int, created time.Time) *routev3.RouteConfiguration {
	var routes []*routev3.Route
	for k := j; k < s.Clusters; k += s.Routes {
		routes = append(routes, clusterRoute("/"+ClusterName(k)+"/", s.Name(Clusters, k)))
	}
	routes = append(routes, clusterRoute("", s.Name(Clusters, j%s.Clusters)))
	return &routev3.RouteConfiguration{
		Name: s.Name(Routes, j),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "vhost-" + strconv.Itoa(j),
			Domains: []string{"*"},
			Routes:  routes,
		}},
		Metadata: Stamp(created),
	}
}

func clusterRoute(prefix, cluster string) *routev3.Route {
	return &routev3.Route{
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
		}},
	}
}

// Cluster returns cluster k: an EDS cluster over ADS with round-robin balancing.
func (s Spec) Cluster(k int, created time.Time) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 s.Name(Clusters, k),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsSource(),
			ServiceName: s.Name(Endpoints, k),
		},
		ConnectTimeout: durationpb.New(time.Second),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
		Metadata:       Stamp(created),
	}
}

// ClusterLoadAssignment returns the endpoints of cluster k: one locality with
// weight 1 and EndpointsPerCluster endpoints at distinct 10.0.0.0/8 addresses,
// port 8080. The stamp is on the first endpoint.
func (s Spec) ClusterLoadAssignment(k int, created time.Time) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, s.EndpointsPerCluster)
	for e := range lbs {
		n := k*s.EndpointsPerCluster + e + 1
		addr := fmt.Sprintf("10.%d.%d.%d", n>>16&0xff, n>>8&0xff, n&0xff)
		lbs[e] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       addr,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
	}
	lbs[0].Metadata = Stamp(created)
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: s.Name(Endpoints, k),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "region-1", Zone: "zone-" + strconv.Itoa(k%3)},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}
}
