package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Authorization rules: a denied subscription gets a TP3 PERMISSION_DENIED
// error for that resource (the stream stays up and gets what it may have);
// a denied wildcard ends the stream with PERMISSION_DENIED; secrets need
// mTLS by default.
func TestAuthorization(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("public-1", "secret-1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{Rules: []config.AuthzRule{
			{Nodes: []string{"frontend-*"}, Types: []string{"Cluster"}, Names: []string{"public-*"}},
			{Nodes: []string{"admin"}},
		}}
	}))

	fe := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "frontend-7"})
	fe.Subscribe(resource.ClusterType, "public-1", "secret-1")
	resp := fe.RecvType(resource.ClusterType)
	if len(resp.GetResources()) == 0 {
		fe.Ack(resp)
		resp = fe.RecvType(resource.ClusterType)
	}
	wantNames(t, resp, "public-1")
	errs := resp.GetResourceErrors()
	if len(errs) != 1 || errs[0].GetResourceName().GetName() != "secret-1" ||
		codes.Code(errs[0].GetErrorDetail().GetCode()) != codes.PermissionDenied {
		t.Fatalf("resource_errors = %v, want PERMISSION_DENIED for secret-1", errs)
	}

	wild := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "frontend-8"})
	wild.Subscribe(resource.ClusterType, "*")
	wantCode(t, wild, codes.PermissionDenied, "not allowed")

	admin := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "admin"})
	admin.Subscribe(resource.ClusterType, "*")
	wantNames(t, admin.RecvType(resource.ClusterType), "public-1", "secret-1")

	// Secrets over plaintext: denied even for the admin.
	admin.Subscribe(resource.SecretType, "s1")
	sresp := admin.RecvType(resource.SecretType)
	if errs := sresp.GetResourceErrors(); len(errs) != 1 || codes.Code(errs[0].GetErrorDetail().GetCode()) != codes.PermissionDenied {
		t.Fatalf("secret over plaintext: %v", sresp)
	}
	for _, req := range up.Requests() {
		for _, n := range req.Names() {
			if n == "s1" {
				t.Fatal("a denied secret reached the upstream")
			}
		}
	}
}
