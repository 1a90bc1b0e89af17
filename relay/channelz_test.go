package relay_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// channelzClient dials the relay's xDS port with the generated channelz
// client, as grpcdebug does.
func channelzClient(t *testing.T, addr string) channelzpb.ChannelzClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return channelzpb.NewChannelzClient(conn)
}

// With `channelz: true` the xDS port serves grpc.channelz.v1.Channelz: the
// relay's server with the xDS client's call counted, and its upstream
// channel; without it (the default) the service is Unimplemented (issue 25,
// item 13).
func TestChannelz(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	t.Run("off by default", func(t *testing.T) {
		r := xdstest.StartRelay(t, up.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := channelzClient(t, r.Addr()).GetServers(ctx, &channelzpb.GetServersRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("GetServers: %v, want Unimplemented", err)
		}
	})
	t.Run("on", func(t *testing.T) {
		r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Channelz = true }))
		client := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n1"})
		client.Subscribe(resource.ClusterType, "c1")
		wantNames(t, client.RecvType(resource.ClusterType), "c1")
		cz := channelzClient(t, r.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		servers, err := cz.GetServers(ctx, &channelzpb.GetServersRequest{})
		if err != nil {
			t.Fatalf("GetServers: %v", err)
		}
		started := int64(0)
		for _, s := range servers.GetServer() {
			started += s.GetData().GetCallsStarted()
		}
		if len(servers.GetServer()) == 0 || started == 0 {
			t.Fatalf("GetServers = %v, want the relay's server with the ADS call", servers)
		}
		top, err := cz.GetTopChannels(ctx, &channelzpb.GetTopChannelsRequest{})
		if err != nil {
			t.Fatalf("GetTopChannels: %v", err)
		}
		if len(top.GetChannel()) == 0 {
			t.Fatalf("GetTopChannels = %v, want the relay's upstream channel", top)
		}
	})
}
