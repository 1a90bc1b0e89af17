package integration_test

import (
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The mTLS identity drives authorization: a client whose SPIFFE ID a rule
// names gets the resource; another client of the same CA gets a TP3
// PERMISSION_DENIED for it.
func TestMTLSIdentityAuthorization(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "relay-ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	clientCA := xdstest.WriteFile(t, dir, "clients-ca.pem", ca.CertPEM())
	addr := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.TLS = &config.TLS{CertFile: cert, KeyFile: key, ClientCAFile: clientCA}
		c.Authorization = &config.Authorization{Rules: []config.AuthzRule{
			{Identities: []string{"spiffe://example.org/ns/prod/sa/*"}, Types: []string{"Cluster"}},
		}}
	})).Addr()

	_, resp, err := openCDS(t, addr, tlsClientCreds(ca.Pool(), ca.Client(t, "spiffe://example.org/ns/prod/sa/frontend").TLS(t)), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := edsService(t, resp); got != "e1" || len(resp.GetResourceErrors()) != 0 {
		t.Fatalf("allowed identity: EDS %q, errors %v", got, resp.GetResourceErrors())
	}

	_, resp, err = openCDS(t, addr, tlsClientCreds(ca.Pool(), ca.Client(t, "spiffe://example.org/ns/dev/sa/frontend").TLS(t)), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !deniedOnly(resp, "c1") {
		t.Fatalf("other identity: %v", resp)
	}
}

func deniedOnly(resp *discoverygrpc.DiscoveryResponse, name string) bool {
	errs := resp.GetResourceErrors()
	return len(resp.GetResources()) == 0 && len(errs) == 1 && errs[0].GetResourceName().GetName() == name &&
		codes.Code(errs[0].GetErrorDetail().GetCode()) == codes.PermissionDenied
}
