package csds_test

import (
	"testing"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Two SotW clients holding the same endpoints show the same versions, how
// ever they came by them: the response versions differ (RDS/EDS responses
// carry only what changed, so one that got e1's change alone names another
// selection than one that got e1 and e2 at once), the per-resource ones do
// not.
func TestSameConfigSameVersion(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{
		resource.EndpointType: {xdstest.Endpoints("e1", "127.0.0.1:1"), xdstest.Endpoints("e2", "127.0.0.1:2")},
	})
	r := xdstest.StartRelay(t, up.Addr())
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f := &fleet{Relay: r, csds: statusv3.NewClientStatusDiscoveryServiceClient(conn)}

	x := xdstest.DialADS(t, f.Addr(), node("envoy-x", "a"))
	x.Subscribe(resource.EndpointType, "e1", "e2")
	for got := 0; got < 2; {
		resp := x.RecvType(resource.EndpointType)
		got += len(resp.GetResources())
		x.Ack(resp)
	}
	up.SetResources(xdstest.Resources{
		resource.EndpointType: {xdstest.Endpoints("e1", "127.0.0.1:3"), xdstest.Endpoints("e2", "127.0.0.1:2")},
	})
	rx := x.RecvType(resource.EndpointType) // e1 alone
	x.Ack(rx)

	y := xdstest.DialADS(t, f.Addr(), node("envoy-y", "a"))
	y.Subscribe(resource.EndpointType, "e1", "e2")
	ry := y.RecvType(resource.EndpointType)
	y.Ack(ry)
	if len(rx.GetResources()) != 1 || len(ry.GetResources()) != 2 || rx.GetVersionInfo() == ry.GetVersionInfo() {
		t.Fatalf("not the case under test: x got %d resources at %s, y %d at %s", len(rx.GetResources()), rx.GetVersionInfo(),
			len(ry.GetResources()), ry.GetVersionInfo())
	}

	versions := func(i int) map[string]string {
		out := map[string]string{}
		resp := f.fetch(t)
		if len(resp.GetConfig()) != 2 {
			return nil
		}
		for _, g := range resp.GetConfig()[i].GetGenericXdsConfigs() {
			if g.GetConfigStatus() == statusv3.ConfigStatus_SYNCED {
				out[g.GetName()] = g.GetVersionInfo()
			}
		}
		return out
	}
	xdstest.Eventually(t, func() bool {
		vx, vy := versions(0), versions(1)
		return len(vx) == 2 && len(vy) == 2 && vx["e1"] == vy["e1"] && vx["e2"] == vy["e2"]
	}, "x and y SYNCED at the same versions", func() any { return f.fetch(t) })
}
