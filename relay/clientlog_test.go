package relay_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A client's connect, NACK and disconnect are logged at Info with its node
// id; the NACK line carries the type, the version rejected and the client's
// error message.
func TestClientLifecycleLoggedAtInfo(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelayLogged(t, zap.New(obs), up.Addr())
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "node-7"})
	c.Subscribe(resource.ClusterType, "c1")
	resp := c.RecvType(resource.ClusterType)
	c.Nack(resp, "bad cluster c1")
	xdstest.Eventually(t, func() bool { return logs.FilterMessage("client NACKed a response").Len() == 1 },
		"the NACK logged", func() any { return logs.All() })
	c.Close()
	xdstest.Eventually(t, func() bool { return logs.FilterMessage("client disconnected").Len() == 1 },
		"the disconnect logged", func() any { return logs.All() })

	connected := logs.FilterMessage("client connected").All()
	if len(connected) != 1 || connected[0].ContextMap()["node"] != "node-7" {
		t.Errorf("connect lines = %v, want one with node node-7", connected)
	}
	nack := logs.FilterMessage("client NACKed a response").All()[0].ContextMap()
	want := map[string]any{"node": "node-7", "type": resource.ClusterType, "version": resp.GetVersionInfo(),
		"error": "bad cluster c1"}
	for k, v := range want {
		if nack[k] != v {
			t.Errorf("NACK line %s = %v, want %v (line %v)", k, nack[k], v, nack)
		}
	}
	if got := logs.FilterMessage("client disconnected").All()[0].ContextMap()["node"]; got != "node-7" {
		t.Errorf("disconnect line node = %v, want node-7", got)
	}
}
