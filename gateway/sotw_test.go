package gateway_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Data planes of one cluster share one upstream stream and get the same
// snapshot, each with its own nonce; another cluster is another group; a
// change reaches exactly the data planes of its cluster.
func TestSotWFanOut(t *testing.T) {
	e := start(t)
	blue, v1 := e.publish("blue", 0)
	green, g1 := e.publish("green", 0)

	dps := map[string]*xdstest.GatewaySotW{}
	for _, n := range []string{"blue-1", "blue-2", "green-1"} {
		cluster := n[:len(n)-2]
		dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
		dp.Send(subscribe(n, cluster, "")) // no subscriptions: every type
		dps[n] = dp
	}
	nonces := map[string]bool{}
	for n, dp := range dps {
		resp := dp.MustRecv()
		if n == "green-1" {
			wantSnapshot(t, resp, green, g1)
		} else {
			wantSnapshot(t, resp, blue, v1)
		}
		nonces[n+resp.GetNonce()] = true
		dp.Send(ack(resp))
	}
	blue2, v2 := e.publish("blue", 1)
	for _, n := range []string{"blue-1", "blue-2"} {
		resp := dps[n].MustRecv()
		wantSnapshot(t, resp, blue2, v2)
		dps[n].Send(ack(resp))
	}
	dps["green-1"].ExpectNone(quiet)
	dps["blue-1"].ExpectNone(quiet) // an ACK is not answered

	if n := upstreamStreams(e.cp, "blue", false); n != 1 {
		t.Errorf("%d upstream StreamConfiguration streams for blue, want 1 for its two data planes", n)
	}
	// The relay ACKed every snapshot upstream with its version.
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	err := e.cp.Wait(ctx, func(reqs []gatewaycp.Request, _ []*controlv1.StatusReport) bool {
		for _, r := range reqs {
			if r.Sotw != nil && r.Sotw.GetCluster() == "blue" && r.Sotw.GetVersion() == v2 && r.Sotw.GetResultStatus() == gatewaycp.ACK {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no upstream ACK of %s: %v", v2, err)
	}
	info := e.relay.DebugGateway("")
	if len(info.Groups) != 2 || info.Groups[0].Key != "cluster=blue" || info.Groups[0].Streams != 2 ||
		info.Groups[0].Version != v2 || !info.Groups[0].Connected {
		t.Errorf("/debug/gateway groups = %+v", info.Groups)
	}
	clients := e.relay.DebugClients("blue-1")
	if len(clients) != 1 || clients[0].Protocol != "gateway-sotw" ||
		clients[0].Types["type.googleapis.com/gateway.control.v1.ConfigSnapshot"].AckedVersion != v2 {
		t.Errorf("/debug/clients = %+v", clients)
	}
}

// xDS rules on the gateway's stream: a NACKed snapshot is never resent (the
// next version is), a stale nonce is not a verdict, and a data plane that
// comes back with the current version is not sent it again.
func TestSotWNACKStaleAndReconnect(t *testing.T) {
	e := start(t)
	_, v1 := e.publish("blue", 0)
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp.Send(subscribe("blue-1", "blue", "", controlv1.ListenerType, controlv1.HttpRouteType))
	r1 := dp.MustRecv()
	if r1.GetVersion() != v1 || len(r1.GetSnapshot().GetListeners()) != spec.Listeners || len(r1.GetSnapshot().GetBackends()) != 0 {
		t.Fatalf("filtered snapshot %v: want listeners and routes only", r1.GetVersion())
	}
	dp.Send(nack(r1, "bad route"))
	dp.ExpectNone(quiet)
	c := e.relay.DebugClients("blue-1")[0].Types["type.googleapis.com/gateway.control.v1.ConfigSnapshot"]
	if c.LastNACK != "bad route" || c.AckedVersion != "" {
		t.Fatalf("after the NACK: %+v", c)
	}

	_, v2 := e.publish("blue", 1)
	r2 := dp.MustRecv()
	if r2.GetVersion() != v2 || r2.GetNonce() == r1.GetNonce() {
		t.Fatalf("after a change: version %q nonce %q", r2.GetVersion(), r2.GetNonce())
	}
	dp.Send(nack(r1, "late answer to the first")) // stale nonce: ignored
	dp.Send(ack(r2))
	xdstest.Eventually(t, func() bool {
		c := e.relay.DebugClients("blue-1")[0].Types["type.googleapis.com/gateway.control.v1.ConfigSnapshot"]
		return c.AckedVersion == v2 && c.LastNACK == "bad route"
	}, "v2 ACKed, the stale NACK ignored", func() any { return e.relay.DebugClients("blue-1") })

	// Reconnect with the current version: nothing to send.
	dp.Close()
	dp2 := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp2.Send(subscribe("blue-1", "blue", v2, controlv1.ListenerType, controlv1.HttpRouteType))
	dp2.ExpectNone(quiet)
	_, v3 := e.publish("blue", 1)
	if r := dp2.MustRecv(); r.GetVersion() != v3 {
		t.Fatalf("after reconnecting: %q, want %q", r.GetVersion(), v3)
	}
}

// While the upstream is away the relay keeps serving its snapshot (fail
// static) — to a data plane that joins then too — and resumes when it is
// back.
func TestSotWFailStatic(t *testing.T) {
	e := start(t)
	snap, v1 := e.publish("blue", 0)
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp.Send(subscribe("blue-1", "blue", ""))
	r := dp.MustRecv()
	wantSnapshot(t, r, snap, v1)
	dp.Send(ack(r))

	e.cp.Stop()
	xdstest.Eventually(t, func() bool { return !e.relay.DebugGateway("").Groups[0].Connected }, "the group disconnected", nil)
	dp.ExpectNone(quiet) // the stream stays, nothing is taken back
	late := xdstest.DialGatewaySotW(t, e.relay.Addr())
	late.Send(subscribe("blue-2", "blue", ""))
	wantSnapshot(t, late.MustRecv(), snap, v1)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := e.cp.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	snap2, v2 := e.publish("blue", 2)
	wantSnapshot(t, dp.MustRecv(), snap2, v2)
	wantSnapshot(t, late.MustRecv(), snap2, v2)
}

// Every bad request ends its stream with a clear status; the other data
// planes of the group go on.
func TestSotWBadRequests(t *testing.T) {
	e := start(t)
	e.publish("blue", 0)
	good := xdstest.DialGatewaySotW(t, e.relay.Addr())
	good.Send(subscribe("good", "blue", ""))
	good.Send(ack(good.MustRecv()))

	many := make([]string, 65)
	for i := range many {
		many[i] = "type.googleapis.com/x.T" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	tests := []struct {
		name string
		reqs []*controlv1.DiscoveryRequest
		code codes.Code
		msg  string
	}{
		{"no node", []*controlv1.DiscoveryRequest{subscribe("", "blue", "")}, codes.InvalidArgument, "node_id is required"},
		{"bad type", []*controlv1.DiscoveryRequest{subscribe("n", "blue", "", "no-slash")}, codes.InvalidArgument, `malformed type URL "no-slash"`},
		{"too many types", []*controlv1.DiscoveryRequest{subscribe("n", "blue", "", many...)}, codes.ResourceExhausted, "65 subscriptions"},
		{"node changed", []*controlv1.DiscoveryRequest{subscribe("n", "blue", ""), subscribe("m", "blue", "")}, codes.InvalidArgument, "node changed mid-stream"},
		{"cluster changed", []*controlv1.DiscoveryRequest{subscribe("n", "blue", ""), subscribe("n", "green", "")}, codes.InvalidArgument, "node changed mid-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
			for _, r := range tt.reqs {
				dp.Send(r)
			}
			for {
				_, err := dp.Recv()
				if err == nil {
					continue // the snapshot before the bad request
				}
				if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Fatalf("stream ended with %v, want %v %q", err, tt.code, tt.msg)
				}
				break
			}
		})
	}
	snap2, v2 := e.publish("blue", 1)
	wantSnapshot(t, good.MustRecv(), snap2, v2)
}

// Secrets are served under the rules of secrets: without mTLS (and without
// allow_secrets_without_mtls) a stream for every type, or for
// SecretMaterial, is refused; one for other types is served.
func TestSotWSecretsNeedMTLS(t *testing.T) {
	e := start(t, xdstest.WithConfig(func(c *config.Config) { c.Authorization = nil }))
	_, v1 := e.publish("blue", 0)
	for _, types := range [][]string{nil, {controlv1.SecretMaterialType}} {
		dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
		dp.Send(subscribe("n", "blue", "", types...))
		_, err := dp.Recv()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "secrets are served over mTLS only") {
			t.Fatalf("subscriptions %v over plaintext: %v, want PermissionDenied", types, err)
		}
	}
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp.Send(subscribe("n", "blue", "", controlv1.ListenerType, controlv1.BackendClusterType))
	r := dp.MustRecv()
	if r.GetVersion() != v1 || len(r.GetSnapshot().GetSecrets()) != 0 {
		t.Fatalf("listeners and backends: %q with %d secrets", r.GetVersion(), len(r.GetSnapshot().GetSecrets()))
	}
}

// A snapshot over grpc's default 4 MiB receive limit reaches the data planes:
// the relay's upstream streams accept what its xDS upstream streams accept
// (upstream.MaxRecvMsgSize). It was re-downloaded in a loop and never served.
func TestSotWSnapshotOver4MiB(t *testing.T) {
	e := start(t)
	snap := e.fleet.Snapshot("big", time.Now())
	snap.Extensions = &structpb.Struct{Fields: map[string]*structpb.Value{"blob": structpb.NewStringValue(strings.Repeat("x", 5<<20))}}
	v := e.cp.Set("big", snap)
	if n := proto.Size(snap); n <= 4<<20 {
		t.Fatalf("the snapshot is %d bytes: not over 4 MiB", n)
	}
	dp := xdstest.DialGatewaySotW(t, e.relay.Addr())
	dp.Send(subscribe("big-1", "big", ""))
	wantSnapshot(t, dp.MustRecv(), snap, v)
}

// A data plane that comes running a version the relay does not hold (from
// another replica) is not sent the relay's snapshot while the upstream is
// away: it may be older. Once the upstream answers, the data plane gets what
// the upstream has.
func TestSotWNoRollbackWhileUpstreamAway(t *testing.T) {
	e := start(t)
	_, v1 := e.publish("blue", 0)
	first := xdstest.DialGatewaySotW(t, e.relay.Addr())
	first.Send(subscribe("blue-1", "blue", ""))
	resp := first.MustRecv()
	first.Send(ack(resp))
	if resp.GetVersion() != v1 {
		t.Fatalf("first data plane got %s, want %s", resp.GetVersion(), v1)
	}

	e.cp.Stop()
	xdstest.Eventually(t, func() bool { return !e.relay.DebugGateway("").Groups[0].Connected },
		"the gateway's upstream stream ended", nil)
	v2snap, v2 := e.publish("blue", 1) // what a replica still connected has sent its data planes
	moved := xdstest.DialGatewaySotW(t, e.relay.Addr())
	moved.Send(subscribe("blue-2", "blue", v2))
	moved.ExpectNone(quiet)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := e.cp.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, first.MustRecv(), v2snap, v2)
	moved.ExpectNone(quiet) // it runs the upstream's version already
	v3snap, v3 := e.publish("blue", 1)
	wantSnapshot(t, moved.MustRecv(), v3snap, v3)
}

// A NACKed answer is no answer: when the upstream comes back with a snapshot
// the relay rejects, a data plane that came running another version while
// the upstream was away is still not sent the cached snapshot — it may be
// older than what the data plane runs.
func TestSotWNoRollbackAfterNACKedAnswer(t *testing.T) {
	e := start(t)
	_, v1 := e.publish("blue", 0)
	first := xdstest.DialGatewaySotW(t, e.relay.Addr())
	first.Send(subscribe("blue-1", "blue", ""))
	if resp := first.MustRecv(); resp.GetVersion() != v1 {
		t.Fatalf("first data plane got %s, want %s", resp.GetVersion(), v1)
	}

	e.cp.Stop()
	xdstest.Eventually(t, func() bool { return !e.relay.DebugGateway("").Groups[0].Connected },
		"the gateway's upstream stream ended", nil)
	moved := xdstest.DialGatewaySotW(t, e.relay.Addr())
	moved.Send(subscribe("blue-2", "blue", "v-of-a-replica-ahead"))
	moved.ExpectNone(quiet)

	// The control plane's address now answers with a snapshot without a
	// version, which the relay NACKs.
	var lis net.Listener
	xdstest.Eventually(t, func() bool {
		var err error
		lis, err = net.Listen("tcp", e.cp.Addr())
		return err == nil
	}, "the control plane's address is free again", nil)
	g := grpc.NewServer()
	controlv1.RegisterConfigurationDiscoveryServiceServer(g, versionless{})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	xdstest.Eventually(t, func() bool { return e.relay.DebugGateway("").Groups[0].Connected },
		"the gateway's upstream stream answered", nil)
	moved.ExpectNone(quiet)
}

// versionless answers every StreamConfiguration with a snapshot without a
// version.
type versionless struct {
	controlv1.UnimplementedConfigurationDiscoveryServiceServer
}

func (versionless) StreamConfiguration(stream controlv1.ConfigurationDiscoveryService_StreamConfigurationServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&controlv1.DiscoveryResponse{Nonce: "1", Snapshot: &controlv1.ConfigSnapshot{Id: "no-version"}}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
