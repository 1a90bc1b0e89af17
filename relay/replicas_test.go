package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Versions derive from content, so relay replicas are interchangeable: a
// Delta client that moves from one replica to another with
// initial_resource_versions is sent nothing it already holds, and a SotW
// client sees the same version_info on both.
func TestReplicasAreInterchangeable(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2", "c3"))
	a := xdstest.StartRelay(t, up.Addr())
	b := xdstest.StartRelay(t, up.Addr())

	d := xdstest.DialDelta(t, a.Addr(), &core.Node{Id: "mover"})
	d.Subscribe(resource.ClusterType, []string{"*"}, nil)
	resp := d.MustRecv()
	held := map[string]string{}
	for _, r := range resp.GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	d.Close()

	// Warm replica b so that it has the resources, then move the client.
	warm := xdstest.DialADS(t, b.Addr(), &core.Node{Id: "warm"})
	warm.Subscribe(resource.ClusterType, "*")
	first := warm.RecvType(resource.ClusterType)
	wantNames(t, first, "c1", "c2", "c3")
	warmVersion := first.GetVersionInfo()

	moved := xdstest.DialDelta(t, b.Addr(), &core.Node{Id: "mover"})
	moved.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: held})
	// The wildcard is answered (so the client knows it is in sync) with nothing in it.
	wantDelta(t, moved.MustRecv(), nil, nil)
	moved.ExpectNoResponse(quiet)

	sa := xdstest.DialADS(t, a.Addr(), &core.Node{Id: "sa"})
	sa.Subscribe(resource.ClusterType, "*")
	if va, vb := sa.RecvType(resource.ClusterType).GetVersionInfo(), warmVersion; va != vb {
		t.Fatalf("replicas disagree on the version of the same state: %q vs %q", va, vb)
	}
}
