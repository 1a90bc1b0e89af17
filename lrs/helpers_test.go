package lrs_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/lrs"
)

// upstreamLRS is a test control plane's LoadReportingService on
// 127.0.0.1:0: it answers each stream with resp (after the hold channel is
// closed, when set) and records every request.
type upstreamLRS struct {
	lrsv3.UnimplementedLoadReportingServiceServer
	addr          string
	resp          *lrsv3.LoadStatsResponse
	hold          chan struct{}
	unimplemented bool

	mu    sync.Mutex
	nodes []*corev3.Node
	stats []*endpointv3.ClusterStats
	got   chan struct{} // one slot: a request arrived
}

func startUpstream(t *testing.T, u *upstreamLRS) *upstreamLRS {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr, u.got = lis.Addr().String(), make(chan struct{}, 1)
	if u.resp == nil {
		u.resp = &lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(100 * time.Millisecond)}
	}
	g := grpc.NewServer()
	if !u.unimplemented {
		lrsv3.RegisterLoadReportingServiceServer(g, u)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return u
}

func (u *upstreamLRS) StreamLoadStats(ss lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	first := true
	for {
		req, err := ss.Recv()
		if err != nil {
			return err
		}
		u.mu.Lock()
		if req.GetNode() != nil {
			u.nodes = append(u.nodes, req.GetNode())
		}
		u.stats = append(u.stats, req.GetClusterStats()...)
		u.mu.Unlock()
		select {
		case u.got <- struct{}{}:
		default:
		}
		if first {
			first = false
			if u.hold != nil {
				select {
				case <-u.hold:
				case <-ss.Context().Done():
					return status.Error(codes.Canceled, "gone")
				}
			}
			if err := ss.Send(u.resp); err != nil {
				return err
			}
		}
	}
}

// received returns what the upstream received so far.
func (u *upstreamLRS) received() (nodes []*corev3.Node, stats []*endpointv3.ClusterStats) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append(nodes, u.nodes...), append(stats, u.stats...)
}

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
	ctx, cancel := context.WithCancel(context.Background())
	st, err := lrsv3.NewLoadReportingServiceClient(r.conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{st: st, cancel: cancel, resps: make(chan *lrsv3.LoadStatsResponse, 16)}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: id}}); err != nil {
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
