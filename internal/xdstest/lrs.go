package xdstest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// LRSUpstream is a control plane's LoadReportingService on 127.0.0.1:0: it
// answers each stream's first request with Resp (once Hold is closed, when
// set) and records every request. Set the fields before StartLRS.
type LRSUpstream struct {
	lrsv3.UnimplementedLoadReportingServiceServer
	// Resp is the answer; default: send_all_clusters every 100 ms.
	Resp *lrsv3.LoadStatsResponse
	// Hold, when set, delays the answer until it is closed.
	Hold chan struct{}
	// Unimplemented leaves the service unregistered (UNIMPLEMENTED).
	Unimplemented bool
	// Linger keeps a stream open after the client half-closed it, until
	// the client cancels it.
	Linger bool
	// Listen is the address StartLRS listens on; default 127.0.0.1:0.
	Listen string
	// Got has a value after each request (one slot).
	Got chan struct{}

	addr   string
	mu     sync.Mutex
	nodes  []*core.Node
	stats  []*endpointv3.ClusterStats
	byNode map[string][]*endpointv3.ClusterStats // by the node id of the stream's first request
}

// StartLRS serves u until the test ends.
func StartLRS(tb testing.TB, u *LRSUpstream) *LRSUpstream {
	tb.Helper()
	addr := u.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("xdstest: LRS listen: %v", err)
	}
	u.init(lis.Addr().String())
	g := grpc.NewServer()
	if !u.Unimplemented {
		lrsv3.RegisterLoadReportingServiceServer(g, u)
	}
	go func() { _ = g.Serve(lis) }()
	tb.Cleanup(g.Stop)
	return u
}

// init sets the defaults, for a server at addr.
func (u *LRSUpstream) init(addr string) {
	u.addr, u.Got = addr, make(chan struct{}, 1)
	if u.Resp == nil {
		u.Resp = &lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(100 * time.Millisecond)}
	}
}

// Addr is the server's address.
func (u *LRSUpstream) Addr() string { return u.addr }

// StreamLoadStats records the stream's requests and answers the first.
func (u *LRSUpstream) StreamLoadStats(ss lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	var node string
	for first := true; ; first = false {
		req, err := ss.Recv()
		if errors.Is(err, io.EOF) && u.Linger {
			<-ss.Context().Done()
			return status.Error(codes.Canceled, "xdstest: stream ended")
		}
		if err != nil {
			return err
		}
		if first {
			node = req.GetNode().GetId()
		}
		u.record(node, req)
		if !first {
			continue
		}
		if u.Hold != nil {
			select {
			case <-u.Hold:
			case <-ss.Context().Done():
				return status.Error(codes.Canceled, "xdstest: stream ended")
			}
		}
		if err := ss.Send(u.Resp); err != nil {
			return err
		}
	}
}

func (u *LRSUpstream) record(node string, req *lrsv3.LoadStatsRequest) {
	u.mu.Lock()
	if u.byNode == nil {
		u.byNode = map[string][]*endpointv3.ClusterStats{}
	}
	u.byNode[node] = append(u.byNode[node], req.GetClusterStats()...)
	if req.GetNode() != nil {
		u.nodes = append(u.nodes, req.GetNode())
	}
	u.stats = append(u.stats, req.GetClusterStats()...)
	u.mu.Unlock()
	select {
	case u.Got <- struct{}{}:
	default:
	}
}

// Received returns the nodes and the cluster stats received so far.
func (u *LRSUpstream) Received() (nodes []*core.Node, stats []*endpointv3.ClusterStats) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append(nodes, u.nodes...), append(stats, u.stats...)
}

// ReceivedFrom returns the cluster stats received so far on the streams
// whose first request presented the node id.
func (u *LRSUpstream) ReceivedFrom(nodeID string) []*endpointv3.ClusterStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*endpointv3.ClusterStats(nil), u.byNode[nodeID]...)
}
