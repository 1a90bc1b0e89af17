package keying_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReferences(t *testing.T) {
	rds := &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{
		Rds: &hcmv3.Rds{RouteConfigName: "xdstp://a/envoy.config.route.v3.RouteConfiguration/r?b=2&a=1"}}}
	inline := &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{
		RouteConfig: &routev3.RouteConfiguration{VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{{
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "inline-c"}}}}}}}}}}
	tcp := &tcpv3.TcpProxy{ClusterSpecifier: &tcpv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpv3.TcpProxy_WeightedCluster{
		Clusters: []*tcpv3.TcpProxy_WeightedCluster_ClusterWeight{{Name: "w1"}, {Name: "w2"}}}}}
	route := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{
		{Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "c1"},
			RequestMirrorPolicies: []*routev3.RouteAction_RequestMirrorPolicy{{Cluster: "mirror"}}}}},
		{Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
			WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "c2"}}}}}}},
		{Action: &routev3.Route_Redirect{}},
	}}}}
	for _, tc := range []struct {
		name    string
		typeURL string
		msg     proto.Message
		want    keying.Refs
	}{
		{"listener rds, canonical", keying.ListenerType, &listenerv3.Listener{FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, rds)}}}}}},
			keying.Refs{keying.RouteType: {"xdstp://a/envoy.config.route.v3.RouteConfiguration/r?a=1&b=2"}}},
		{"api listener inline routes", keying.ListenerType, &listenerv3.Listener{ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, inline)}},
			keying.Refs{keying.ClusterType: {"inline-c"}}},
		{"tcp proxy in the default chain", keying.ListenerType, &listenerv3.Listener{DefaultFilterChain: &listenerv3.FilterChain{
			Filters: []*listenerv3.Filter{{ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, tcp)}}}}},
			keying.Refs{keying.ClusterType: {"w1", "w2"}}},
		{"route clusters", keying.RouteType, route, keying.Refs{keying.ClusterType: {"c1", "mirror", "c2"}}},
		{"scoped route", keying.ScopedRouteType, &routev3.ScopedRouteConfiguration{RouteConfigurationName: "r"}, keying.Refs{keying.RouteType: {"r"}}},
		{"eds cluster", keying.ClusterType, &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "eds-c"}}, keying.Refs{keying.EndpointType: {"eds-c"}}},
		{"eds cluster by its name", keying.ClusterType, &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}},
			keying.Refs{keying.EndpointType: {"c"}}},
		{"static cluster", keying.ClusterType, &clusterv3.Cluster{Name: "c"}, nil},
		{"endpoints", keying.EndpointType, &endpointv3.ClusterLoadAssignment{ClusterName: "c"}, nil},
		{"opaque type", keying.RuntimeType, &corev3.Node{Id: "x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, keying.References(tc.typeURL, b)); diff != "" {
				t.Fatalf("References (-want +got):\n%s", diff)
			}
		})
	}
	if got := keying.References(keying.ListenerType, []byte{0xff, 0xff}); got != nil {
		t.Fatalf("undecodable bytes refer to %v", got)
	}
}

// FuzzReferences: any bytes, any well-known type: no panic.
//
//	go test ./keying -run '^$' -fuzz FuzzReferences -fuzztime 60s
func FuzzReferences(f *testing.F) {
	c, _ := proto.Marshal(&clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}})
	f.Add(0, c)
	f.Add(1, []byte{0x0a, 0x01, 'x'})
	types := []string{keying.ClusterType, keying.ListenerType, keying.RouteType, keying.ScopedRouteType, keying.EndpointType}
	f.Fuzz(func(t *testing.T, i int, b []byte) {
		keying.References(types[uint(i)%uint(len(types))], b)
	})
}
