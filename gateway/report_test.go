package gateway_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

func reportClient(t *testing.T, addr string) controlv1.ConfigurationDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return controlv1.NewConfigurationDiscoveryServiceClient(conn)
}

// waitReports waits until the control plane received n reports.
func waitReports(t *testing.T, cp *gatewaycp.Server, n int) []*controlv1.StatusReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := cp.Wait(ctx, func(_ []gatewaycp.Request, reps []*controlv1.StatusReport) bool { return len(reps) >= n }); err != nil {
		t.Fatalf("the control plane has %d reports, want %d", len(cp.Reports()), n)
	}
	return cp.Reports()
}

// ReportStatus is answered at once, forwarded upstream (retried when the
// control plane fails), kept per node for /debug/gateway and counted by
// version and readiness.
func TestReportStatus(t *testing.T) {
	e := start(t, xdstest.WithConfig(func(c *config.Config) { c.Gateway = &config.Gateway{ReportRetries: 3} }))
	client := reportClient(t, e.relay.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	report := func(node, version string, ready bool) {
		t.Helper()
		ack, err := client.ReportStatus(ctx, &controlv1.StatusReport{NodeId: node, Version: version, Ready: ready, Message: "m"})
		if err != nil || !ack.GetAccepted() {
			t.Fatalf("ReportStatus(%s) = %v, %v; want accepted", node, ack, err)
		}
	}
	report("dp-1", "v1", true)
	report("dp-2", "v1", false)
	got := waitReports(t, e.cp, 2)
	if got[0].GetNodeId() != "dp-1" || got[0].GetVersion() != "v1" || !got[0].GetReady() || got[0].GetMessage() != "m" {
		t.Fatalf("forwarded report %v", got[0])
	}
	metric := func(labels string) float64 {
		return xdstest.Metric(t, e.relay.Registry(), "xds_relay_gateway_dataplanes{"+labels+"}")
	}
	if metric(`ready="true",version="v1"`) != 1 || metric(`ready="false",version="v1"`) != 1 {
		t.Fatalf("dataplanes gauge: ready %v not ready %v", metric(`ready="true",version="v1"`), metric(`ready="false",version="v1"`))
	}

	// dp-2 moves to v2: the v1/not-ready label set goes away.
	e.cp.FailReports(2) // two failures, then the third attempt goes through
	report("dp-2", "v2", true)
	got = waitReports(t, e.cp, 3)
	if got[2].GetNodeId() != "dp-2" || got[2].GetVersion() != "v2" {
		t.Fatalf("retried report %v", got[2])
	}
	if metric(`ready="true",version="v2"`) != 1 || metric(`ready="false",version="v1"`) != 0 {
		t.Fatal("the dataplanes gauge did not follow dp-2 to v2")
	}
	reps := e.relay.DebugGateway("dp-2").Reports
	if len(reps) != 1 || reps[0].Version != "v2" || !reps[0].Ready {
		t.Fatalf("/debug/gateway reports for dp-2 = %+v", reps)
	}
	xdstest.Eventually(t, func() bool { return e.relay.DebugGateway("dp-2").Reports[0].Forwarded == "forwarded" },
		"dp-2's report marked forwarded", nil)
	// /debug/clients shows it with dp-2's stream.
	e.publish("blue", 0)
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp.Send(subscribe("dp-2", "blue", ""))
	dp.Send(ack(dp.MustRecv()))
	var streams []relay.ClientInfo
	xdstest.Eventually(t, func() bool { streams = e.relay.DebugClients("dp-2"); return len(streams) == 1 },
		"dp-2's stream in /debug/clients", func() any { return streams })
	if st := streams[0].Status; st == nil || st.Version != "v2" || !st.Ready {
		t.Fatalf("/debug/clients status of dp-2 = %+v", st)
	}

	// Beyond the retries a report is dropped, counted, and the data plane
	// still had its answer at once.
	e.cp.FailReports(3)
	report("dp-3", "v2", true)
	xdstest.Eventually(t, func() bool {
		return xdstest.Metric(t, e.relay.Registry(), `xds_relay_gateway_reports_total{result="failed"}`) == 1
	},
		"the failed report counted", nil)
	if r := e.relay.DebugGateway("dp-3").Reports; len(r) != 1 || r[0].Forwarded != "failed" {
		t.Fatalf("dp-3 report %+v, want failed", r)
	}

	_, err := client.ReportStatus(ctx, &controlv1.StatusReport{Version: "v1"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_id is required") {
		t.Fatalf("report without a node: %v", err)
	}
}

// A vanished data plane does not disturb the others; the group's upstream
// stream ends after the linger once its last data plane left.
func TestVanishedDataPlanes(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	stay := xdstest.DialGatewaySotW(t, e.relay.Addr())
	stay.Send(subscribe("stay", "blue", ""))
	stay.Send(ack(stay.MustRecv()))
	for i := range 20 {
		dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
		dp.Send(subscribe("gone-"+string(rune('a'+i)), "blue", ""))
		dp.MustRecv()
		dp.Close() // without an ACK
	}
	snap, v := e.publish("blue", 1)
	wantSnapshot(t, stay.MustRecv(), snap, v)
	if n := upstreamStreams(e.cp, "blue", false); n != 1 {
		t.Fatalf("%d upstream streams for blue, want 1", n)
	}
	stay.Close()
	xdstest.Eventually(t, func() bool { return e.cp.OpenStreams() == 0 && len(e.relay.DebugGateway("").Groups) == 0 },
		"the idle group closed after its linger", func() any { return e.relay.DebugGateway("") })
	// A data plane of the cluster later gets a new group and upstream stream.
	back := xdstest.DialGatewaySotW(t, e.relay.Addr())
	back.Send(subscribe("back", "blue", ""))
	wantSnapshot(t, back.MustRecv(), snap, v)
}
