package lrs_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/lrs"
)

// relayLRS is an lrs.Server on its own gRPC server on 127.0.0.1:0.
type relayLRS struct {
	srv  *lrs.Server
	m    *metrics.Metrics
	conn *grpc.ClientConn
}

func startRelay(t *testing.T, opts lrs.Options) *relayLRS {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Node == nil {
		opts.Node = &corev3.Node{Id: "xds-relay-1"}
	}
	opts.Metrics = metrics.New()
	opts.Logger = zaptest.NewLogger(t)
	r := &relayLRS{srv: lrs.New(opts), m: opts.Metrics}
	g := grpc.NewServer()
	r.srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	r.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.conn.Close()
		g.Stop()
		r.srv.Close()
	})
	return r
}

// client is one downstream client's LRS stream.
type client struct {
	st     lrsv3.LoadReportingService_StreamLoadStatsClient
	cancel context.CancelFunc
	resps  chan *lrsv3.LoadStatsResponse
}

func (r *relayLRS) client(t *testing.T, id string) *client {
	t.Helper()
	return r.clientNode(t, &corev3.Node{Id: id})
}

// clientNode is a client presenting node.
func (r *relayLRS) clientNode(t *testing.T, node *corev3.Node) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := lrsv3.NewLoadReportingServiceClient(r.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{st: st, cancel: cancel, resps: make(chan *lrsv3.LoadStatsResponse, 16)}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: node}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			c.resps <- resp
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

func (c *client) send(t *testing.T, stats ...*endpointv3.ClusterStats) {
	t.Helper()
	if err := c.st.Send(&lrsv3.LoadStatsRequest{ClusterStats: stats}); err != nil {
		t.Fatal(err)
	}
}

// next waits for the client's next response.
func (c *client) next(t *testing.T) *lrsv3.LoadStatsResponse {
	t.Helper()
	select {
	case r := <-c.resps:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no LoadStatsResponse within 10s")
		return nil
	}
}
