package fleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/fleet"
	"github.com/xds-relay/xds-relay/keying"
)

type validator interface{ ValidateAll() error }

func specs() []fleet.Spec {
	return []fleet.Spec{
		{Listeners: 1, Routes: 1, Clusters: 1, EndpointsPerCluster: 1, Style: fleet.StyleEnvoy},
		{Listeners: 3, Routes: 2, Clusters: 7, EndpointsPerCluster: 3, Style: fleet.StyleEnvoy},
		{Listeners: 2, Routes: 5, Clusters: 3, EndpointsPerCluster: 2, Style: fleet.StyleGRPC},
		{Listeners: 4, Routes: 4, Clusters: 40, EndpointsPerCluster: 1, Style: fleet.StyleGRPC},
	}
}

// hcmOf returns the HttpConnectionManager of a generated listener.
func hcmOf(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	a := l.GetApiListener().GetApiListener()
	if a == nil {
		a = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := a.UnmarshalTo(hcm); err != nil {
		t.Fatalf("listener %s: HCM: %v", l.GetName(), err)
	}
	return hcm
}

func TestResourcesValidate(t *testing.T) {
	created := time.Unix(1700000000, 123456789)
	for _, spec := range specs() {
		t.Run(fmt.Sprintf("%s-%d-%d-%d-%d", spec.Style, spec.Listeners, spec.Routes, spec.Clusters, spec.EndpointsPerCluster), func(t *testing.T) {
			if err := spec.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			for _, k := range fleet.Kinds {
				for i := range spec.Count(k) {
					m := spec.Resource(k, i, created)
					if err := m.(validator).ValidateAll(); err != nil {
						t.Errorf("%v %d: %v", k, i, err)
					}
					if got, ok := fleet.CreatedUnixNano(m); !ok || got != created.UnixNano() {
						t.Errorf("%v %d: stamp = %d, %v; want %d", k, i, got, ok, created.UnixNano())
					}
					b, err := proto.Marshal(m)
					if err != nil {
						t.Fatalf("%v %d: marshal: %v", k, i, err)
					}
					if len(b) == 0 {
						t.Errorf("%v %d: empty resource", k, i)
					}
				}
			}
			for i := range spec.Listeners {
				l := spec.Listener(i, created)
				if (spec.Style == fleet.StyleGRPC) != (l.GetApiListener() != nil) {
					t.Errorf("listener %d: style %s but api_listener %v", i, spec.Style, l.GetApiListener() != nil)
				}
				hcm := hcmOf(t, l)
				if err := hcm.ValidateAll(); err != nil {
					t.Errorf("listener %d: HCM: %v", i, err)
				}
				if got, want := hcm.GetRds().GetRouteConfigName(), fleet.RouteName(i%spec.Routes); got != want {
					t.Errorf("listener %d: route %q, want %q", i, got, want)
				}
				if hcm.GetRds().GetConfigSource().GetAds() == nil {
					t.Errorf("listener %d: RDS not over ADS", i)
				}
			}
		})
	}
}

func TestTopology(t *testing.T) {
	spec := fleet.Spec{Listeners: 2, Routes: 3, Clusters: 8, EndpointsPerCluster: 2, Style: fleet.StyleGRPC}
	now := time.Now()
	routed := map[string]bool{}
	for j := range spec.Routes {
		rc := spec.RouteConfiguration(j, now)
		if rc.GetName() != fleet.RouteName(j) {
			t.Errorf("route %d named %q", j, rc.GetName())
		}
		for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
			routed[r.GetRoute().GetCluster()] = true
		}
	}
	for k := range spec.Clusters {
		name := fleet.ClusterName(k)
		if !routed[name] {
			t.Errorf("cluster %s is not routed to", name)
		}
		c := spec.Cluster(k, now)
		if c.GetType() != clusterv3.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != name ||
			c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("cluster %s is not an EDS-over-ADS cluster named after itself: %v", name, c)
		}
		cla := spec.ClusterLoadAssignment(k, now)
		if cla.GetClusterName() != name {
			t.Errorf("CLA %d named %q", k, cla.GetClusterName())
		}
		loc := cla.GetEndpoints()[0]
		if loc.GetLoadBalancingWeight().GetValue() < 1 {
			t.Errorf("CLA %s: locality weight %d", name, loc.GetLoadBalancingWeight().GetValue())
		}
		if len(loc.GetLbEndpoints()) != spec.EndpointsPerCluster {
			t.Errorf("CLA %s: %d endpoints", name, len(loc.GetLbEndpoints()))
		}
	}
	// Endpoint addresses are unique across the fleet.
	seen := map[string]string{}
	for k := range spec.Clusters {
		for _, e := range spec.ClusterLoadAssignment(k, now).GetEndpoints()[0].GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			if prev, dup := seen[a]; dup {
				t.Errorf("address %s used by %s and %s", a, prev, fleet.ClusterName(k))
			}
			seen[a] = fleet.ClusterName(k)
		}
	}
}

func TestCreatedUnixNanoAbsent(t *testing.T) {
	for _, m := range []proto.Message{
		&listenerv3.Listener{}, &routev3.RouteConfiguration{}, &clusterv3.Cluster{},
		&endpointv3.ClusterLoadAssignment{}, &endpointv3.ClusterLoadAssignment{Endpoints: []*endpointv3.LocalityLbEndpoints{{}}},
		&hcmv3.HttpConnectionManager{},
	} {
		if n, ok := fleet.CreatedUnixNano(m); ok {
			t.Errorf("%T: stamp %d on an unstamped message", m, n)
		}
	}
	c := &clusterv3.Cluster{Metadata: fleet.Stamp(time.Unix(0, 42))}
	c.Metadata.FilterMetadata[fleet.StampNamespace].Fields[fleet.StampField].Kind = nil
	if _, ok := fleet.CreatedUnixNano(c); ok {
		t.Error("stamp read from a non-string value")
	}
}

// With an Authority every name, and every reference between resources, is
// an xdstp:// URN of it, in canonical form.
func TestXDSTPNames(t *testing.T) {
	spec := fleet.Spec{Listeners: 1, Routes: 1, Clusters: 2, EndpointsPerCluster: 1, Style: fleet.StyleGRPC, Authority: "auth.example"}
	now := time.Now()
	const l = "xdstp://auth.example/envoy.config.listener.v3.Listener/listener-0"
	if got := spec.Name(fleet.Listeners, 0); got != l {
		t.Fatalf("listener name %q, want %q", got, l)
	}
	refs := []string{spec.Listener(0, now).GetName()}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := spec.Listener(0, now).GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	refs = append(refs, hcm.GetRds().GetRouteConfigName(), spec.RouteConfiguration(0, now).GetName())
	for _, r := range spec.RouteConfiguration(0, now).GetVirtualHosts()[0].GetRoutes() {
		refs = append(refs, r.GetRoute().GetCluster())
	}
	c := spec.Cluster(1, now)
	refs = append(refs, c.GetName(), c.GetEdsClusterConfig().GetServiceName(), spec.ClusterLoadAssignment(1, now).GetClusterName())
	for _, n := range refs {
		canon, err := keying.Canonical(n)
		if err != nil || canon != n || !strings.HasPrefix(n, "xdstp://auth.example/envoy.config.") {
			t.Errorf("name %q: canonical %q, %v", n, canon, err)
		}
	}
	if hcm.GetRds().GetRouteConfigName() != spec.RouteConfiguration(0, now).GetName() ||
		c.GetEdsClusterConfig().GetServiceName() != spec.ClusterLoadAssignment(1, now).GetClusterName() {
		t.Errorf("references do not match the names: %v", refs)
	}
}
