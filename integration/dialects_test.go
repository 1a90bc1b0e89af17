package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// One relay, three ways in: a proxyless grpc-go client resolves through it
// over ADS, CSDS shows that client's four resources SYNCED (read with
// go-control-plane's CSDS client), and a REST-JSON poll of the same cluster
// is held and answered when the upstream changes — while the grpc-go client
// follows the same change.
func TestDialectsTogether(t *testing.T) {
	t.Parallel()
	const target = "dialects-svc"
	up := xdstest.StartUpstream(t)
	a, b := xdstest.StartBackend(t, "A"), xdstest.StartBackend(t, "B")
	up.SetResources(xdstest.GRPCResources(target, a.Addr()))
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.REST = &config.REST{Listen: "127.0.0.1:0", PollTimeout: config.DefaultPollTimeout}
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- r.ServeREST(lis) }()
	t.Cleanup(func() {
		_ = r.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})

	conn := dialXDS(t, xdstest.Bootstrap{ServerURI: r.Addr(), NodeID: "grpc-go-csds", NodeCluster: "integration"}.JSON(), target)
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "A"); err != nil {
		t.Fatalf("first RPC: %v", err)
	}

	// CSDS: the grpc-go client's LDS, RDS, CDS and EDS, each SYNCED, with
	// its contents.
	cc, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	csds := statusv3.NewClientStatusDiscoveryServiceClient(cc)
	req := &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "grpc-go-csds"}}}}}
	var resp *statusv3.ClientStatusResponse
	xdstest.Eventually(t, func() bool {
		resp, err = csds.FetchClientStatus(ctx, req)
		if err != nil || len(resp.GetConfig()) != 1 || len(resp.GetConfig()[0].GetGenericXdsConfigs()) != 4 {
			return false
		}
		for _, g := range resp.GetConfig()[0].GetGenericXdsConfigs() {
			if g.GetConfigStatus() != statusv3.ConfigStatus_SYNCED || g.GetClientStatus() != adminv3.ClientResourceStatus_ACKED ||
				g.GetVersionInfo() == "" || g.GetXdsConfig().GetTypeUrl() != g.GetTypeUrl() {
				return false
			}
		}
		return true
	}, "the grpc-go client's four resources SYNCED in CSDS", func() any { return resp })
	if n := resp.GetConfig()[0].GetNode(); n.GetCluster() != "integration" || n.GetUserAgentName() == "" {
		t.Errorf("CSDS node %v, want the grpc-go client's", n)
	}

	// REST: the cluster the grpc-go client uses, then a held poll answered
	// by the EDS change.
	names := xdstest.NamesFor(target)
	rest := "http://" + lis.Addr().String() + "/v3/discovery:endpoints"
	poll := func(version string) (*discoverypb.DiscoveryResponse, error) {
		body, _ := protojson.Marshal(&discoverypb.DiscoveryRequest{Node: &core.Node{Id: "envoy-rest"}, VersionInfo: version,
			ResourceNames: []string{names.Endpoints}})
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, rest, bytes.NewReader(body))
		res, err := http.DefaultClient.Do(hr)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		out := &discoverypb.DiscoveryResponse{}
		if res.StatusCode != http.StatusOK || protojson.Unmarshal(b, out) != nil || out.GetTypeUrl() != resource.EndpointType ||
			len(out.GetResources()) != 1 {
			return nil, fmt.Errorf("REST poll: %d %s", res.StatusCode, b)
		}
		return out, nil
	}
	first, err := poll("")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		resp *discoverypb.DiscoveryResponse
		err  error
	}
	held := make(chan answer, 1)
	go func() {
		resp, err := poll(first.GetVersionInfo())
		held <- answer{resp, err}
	}()
	up.SetResources(xdstest.GRPCResources(target, b.Addr()))
	if err := callUntil(ctx, conn, "B"); err != nil {
		t.Fatalf("after the EDS change: %v", err)
	}
	select {
	case next := <-held:
		if next.err != nil || next.resp.GetVersionInfo() == first.GetVersionInfo() {
			t.Fatalf("the held poll: %v, version %q (was %q)", next.err, next.resp.GetVersionInfo(), first.GetVersionInfo())
		}
	case <-ctx.Done():
		t.Fatal("the held REST poll was not answered after the change")
	}
}
