package csds_test

import (
	"context"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// grpcdebug (github.com/grpc-ecosystem/grpcdebug, the tool the docs point
// at; it cannot be installed here) reads CSDS as this test does: one
// FetchClientStatus with an empty request, no node, no matchers, over
// plaintext. "xds status" prints, per ClientConfig and GenericXdsConfig,
// client_scope, name, client_status, version_info, type_url and
// last_updated — whose Seconds it reads without a nil check, so an entry
// without last_updated crashes it; "xds config --scope S" selects a
// ClientConfig by client_scope and prints it as proto3 JSON.
func TestReadAsGrpcdebugDoes(t *testing.T) {
	f := startFleet(t)
	a := xdstest.DialADS(t, f.Addr(), node("envoy-a", "a")) // SotW wildcard CDS, ACKed
	start := time.Now()
	a.Subscribe(resource.ClusterType)
	a.Ack(a.RecvType(resource.ClusterType))
	b := xdstest.DialDelta(t, f.Addr(), node("envoy-b", "b")) // Delta EDS: e1 held, e9 not sent
	b.Subscribe(resource.EndpointType, []string{"e1", "e9"}, nil)
	b.Ack(b.MustRecv())

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	var resp *statusv3.ClientStatusResponse
	xdstest.Eventually(t, func() bool {
		var err error
		resp, err = f.csds.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
		return err == nil && len(resp.GetConfig()) == 2 && len(resp.GetConfig()[1].GetGenericXdsConfigs()) == 2
	}, "both clients reported", func() any { return resp })

	scopes := map[string]int{}
	for _, cc := range resp.GetConfig() {
		scopes[cc.GetClientScope()]++
		for _, g := range cc.GetGenericXdsConfigs() {
			if g.LastUpdated == nil { // grpcdebug: prettyTime(g.LastUpdated) reads ts.Seconds
				t.Errorf("%s %s %s: no last_updated (grpcdebug xds status dereferences it)", cc.GetClientScope(), g.GetTypeUrl(), g.GetName())
			} else if g.GetConfigStatus() == statusv3.ConfigStatus_SYNCED && g.GetLastUpdated().AsTime().Before(start) {
				t.Errorf("%s %s %s: SYNCED with last_updated %v, before the test started", cc.GetClientScope(), g.GetTypeUrl(),
					g.GetName(), g.GetLastUpdated().AsTime())
			}
			if g.GetName() == "" || g.GetTypeUrl() == "" {
				t.Errorf("%s: an entry without name or type: %v", cc.GetClientScope(), g)
			}
		}
	}
	for _, s := range []string{"envoy-a", "envoy-b"} {
		if scopes[s] != 1 {
			t.Errorf("client_scope %q selects %d ClientConfigs, want 1 (grpcdebug xds config --scope)", s, scopes[s])
		}
	}
	if _, err := (protojson.MarshalOptions{Multiline: true, Indent: "  "}).Marshal(resp); err != nil {
		t.Errorf("grpcdebug xds config prints the answer as JSON: %v", err)
	}
}
