package authz_test

import (
	"testing"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/keying"
)

func TestNew(t *testing.T) {
	plain := &authz.Principal{NodeID: "envoy-1", Cluster: "web"}
	mtls := &authz.Principal{NodeID: "envoy-1", Cluster: "web", MTLS: true,
		SPIFFEID: "spiffe://example.org/web", URISANs: []string{"https://web.example.org"}}
	rules := &config.Authorization{Rules: []config.AuthzRule{
		{Nodes: []string{"envoy-*"}, Types: []string{"Cluster"}, Names: []string{"web-*"}},
		{Identities: []string{"spiffe://example.org/*"}, Types: []string{keying.SecretType}},
		{Clusters: []string{"web"}, Types: []string{"ClusterLoadAssignment"}, Authorities: []string{""}},
		{Clusters: []string{"web"}, Types: []string{"RouteConfiguration"}, Authorities: []string{"*"}},
		{Identities: []string{"https://web.example.org"}, Types: []string{"Listener"}},
	}}
	for _, tc := range []struct {
		name      string
		cfg       *config.Authorization
		p         *authz.Principal
		typeURL   string
		resource  string
		wantAllow bool
	}{
		{"no config: anything", nil, plain, keying.ListenerType, "l", true},
		{"no config: a secret without mTLS", nil, plain, keying.SecretType, "s", false},
		{"no config: SecretMaterial without mTLS", nil, plain, controlv1.SecretMaterialType, "s", false},
		{"no config: a secret over mTLS", nil, mtls, keying.SecretType, "s", true},
		{"secrets allowed without mTLS", &config.Authorization{AllowSecretsWithoutMTLS: true}, plain, keying.SecretType, "s", true},
		{"short type and name globs", rules, plain, keying.ClusterType, "web-1", true},
		{"full type URL in the rule", rules, mtls, keying.SecretType, "s", true},
		{"name glob does not match", rules, plain, keying.ClusterType, "api-1", false},
		{"node glob does not match", rules, &authz.Principal{NodeID: "other", Cluster: "api"}, keying.ClusterType, "web-1", false},
		{"identity rule without mTLS", rules, &authz.Principal{NodeID: "x", Cluster: "api"}, keying.ListenerType, "l", false},
		{"identity rule by URI SAN", rules, mtls, keying.ListenerType, "l", true},
		{"empty authority glob matches a legacy name", rules, plain, keying.EndpointType, "e", true},
		{"empty authority glob refuses an xdstp name", rules, plain, keying.EndpointType, "xdstp://a/T/e", false},
		{"star does not match a legacy name's empty authority", rules, plain, keying.RouteType, "r", false},
		{"star matches an authority", rules, plain, keying.RouteType, "xdstp://a/envoy.config.route.v3.RouteConfiguration/r", true},
		{"the wildcard is a name", rules, plain, keying.ClusterType, keying.Wildcard, false},
	} {
		err := authz.New(tc.cfg)(tc.p, tc.typeURL, tc.resource)
		if (err == nil) != tc.wantAllow {
			t.Errorf("%s: New(...)(%+v, %q, %q) = %v, want allowed %v", tc.name, tc.p, tc.typeURL, tc.resource, err, tc.wantAllow)
		}
	}
}
