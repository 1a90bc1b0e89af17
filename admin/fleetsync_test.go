package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The fleet summary counts, per type, the streams on the latest version,
// behind and NACKing: in xds_relay_fleet_sync_streams and on the status
// page.
func TestFleetSyncSummary(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	r := xdstest.StartRelay(t, up.Addr())
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	acked := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "acked"})
	acked.Subscribe(resource.ClusterType)
	acked.Ack(acked.RecvType(resource.ClusterType))
	silent := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "silent"})
	silent.Subscribe(resource.ClusterType)
	silent.RecvType(resource.ClusterType) // never answered
	nacker := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "nacker"})
	nacker.Subscribe(resource.ClusterType)
	nacker.Nack(nacker.RecvType(resource.ClusterType), "no")

	want := admin.TypeStreams{Type: resource.ClusterType, SotW: 3, Current: 1, Behind: 1, NACKing: 1}
	got := func() admin.TypeStreams {
		for _, ts := range admin.OverviewOf(r.Relay).Fleet.ByType {
			if ts.Type == resource.ClusterType {
				return ts
			}
		}
		return admin.TypeStreams{}
	}
	xdstest.Eventually(t, func() bool { return got() == want }, "one stream current, one behind, one NACKing",
		func() any { return got() })

	metrics := get(t, http.MethodGet, srv.URL+"/metrics").body
	for state, n := range map[string]int{"current": 1, "behind": 1, "nacking": 1} {
		line := fmt.Sprintf(`xds_relay_fleet_sync_streams{state=%q,type_url=%q} %d`, state, resource.ClusterType, n)
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	page := get(t, http.MethodGet, srv.URL+"/?format=html").body
	if !strings.Contains(page, `<td class="n nacking">1</td>`) {
		t.Errorf("the status page shows no NACKing stream for clusters")
	}
	// The summary of clients on the current version, red while one NACKs.
	summary := fmt.Sprintf(`<span class="sync bad" data-type="%s">Cluster: 1 of 3 (33%%), 1 behind, 1 NACKing</span>`, resource.ClusterType)
	if !strings.Contains(page, summary) || !strings.Contains(page, `<td class="n share bad">33%</td>`) {
		t.Errorf("the status page lacks the current-version summary %s", summary)
	}
}
