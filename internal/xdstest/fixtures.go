package xdstest

import (
	"fmt"
	"net"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GRPCNames are the resource names of one proxyless gRPC target.
type GRPCNames struct {
	Listener  string // LDS: the target's name, as in xds:///Listener
	Route     string // RDS: the RouteConfiguration the listener names
	Cluster   string // CDS: the cluster the route sends to
	Endpoints string // EDS: the ClusterLoadAssignment of the cluster
}

// NamesFor derives the resource names of target: the listener is target
// itself, the others are "route-", "cluster-" and "endpoints-" + target. For
// xdstp names build GRPCNames by hand.
func NamesFor(target string) GRPCNames {
	return GRPCNames{
		Listener:  target,
		Route:     "route-" + target,
		Cluster:   "cluster-" + target,
		Endpoints: "endpoints-" + target,
	}
}

// GRPCResources is the minimal resource set that lets a proxyless gRPC client
// (grpc-go, grpc-js-xds, C-core) call xds:///target and reach backends
// (host:port addresses, e.g. Backend.Addr()); names from NamesFor(target).
func GRPCResources(target string, backends ...string) Resources {
	return GRPCResourcesNamed(NamesFor(target), backends...)
}

// GRPCResourcesNamed is GRPCResources with explicit names: a Listener whose
// api_listener is an HttpConnectionManager using RDS over ADS with the router
// filter, a RouteConfiguration with one virtual host "*" routing everything to
// the cluster, an EDS cluster (eds_config: ads) and a ClusterLoadAssignment
// with one locality (weight 1) holding the backends. It panics on a backend
// address that is not host:port, as a test fixture should.
func GRPCResourcesNamed(n GRPCNames, backends ...string) Resources {
	return Resources{
		resource.ListenerType: {GRPCListener(n.Listener, n.Route)},
		resource.RouteType:    {GRPCRoute(n.Route, n.Cluster)},
		resource.ClusterType:  {EDSCluster(n.Cluster, n.Endpoints)},
		resource.EndpointType: {Endpoints(n.Endpoints, backends...)},
	}
}

// adsSource is a ConfigSource saying "over the ADS stream, xDS v3".
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("xdstest: %v", err))
	}
	return a
}

// GRPCListener is a proxyless gRPC client Listener: api_listener with an
// HttpConnectionManager fetching routeName by RDS over ADS, router filter.
func GRPCListener(name, routeName string) *listener.Listener {
	m := &hcm.HttpConnectionManager{
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeName,
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
		}},
	}
	return &listener.Listener{
		Name:        name,
		ApiListener: &listener.ApiListener{ApiListener: mustAny(m)},
	}
}

// GRPCRoute is a RouteConfiguration with one virtual host "*" sending every
// path to clusterName.
func GRPCRoute(name, clusterName string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    "all",
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: ""}},
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterName},
				}},
			}},
		}},
	}
}

// EDSCluster is a round-robin EDS cluster whose endpoints come over ADS
// under edsName.
func EDSCluster(name, edsName string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{
			EdsConfig:   adsSource(),
			ServiceName: edsName,
		},
		LbPolicy: cluster.Cluster_ROUND_ROBIN,
	}
}

// Endpoints is a ClusterLoadAssignment with one locality (weight 1) holding
// the backends (host:port), all HEALTHY.
func Endpoints(name string, backends ...string) *endpoint.ClusterLoadAssignment {
	lbs := make([]*endpoint.LbEndpoint, 0, len(backends))
	for _, b := range backends {
		host, p, err := net.SplitHostPort(b)
		if err != nil {
			panic(fmt.Sprintf("xdstest: backend address %q: %v", b, err))
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			panic(fmt.Sprintf("xdstest: backend port %q: %v", b, err))
		}
		lbs = append(lbs, &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address:       host,
					PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(port)},
				}}},
			}},
			HealthStatus: core.HealthStatus_HEALTHY,
		})
	}
	return &endpoint.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpoint.LocalityLbEndpoints{{
			Locality:            &core.Locality{Region: "test-region", Zone: "test-zone"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         lbs,
		}},
	}
}

// MergeResources returns one Resources holding every resource of sets (for
// several targets in one snapshot).
func MergeResources(sets ...Resources) Resources {
	out := Resources{}
	for _, s := range sets {
		for t, rs := range s {
			out[t] = append(out[t], rs...)
		}
	}
	return out
}
