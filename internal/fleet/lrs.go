package fleet

import (
	"errors"
	"io"
	"sync/atomic"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// LoadStats counts what a Server's load reporting service received.
type LoadStats struct {
	// Streams counts the StreamLoadStats opened.
	Streams int64 `json:"streams"`
	// Reports counts the requests that carried cluster stats.
	Reports int64 `json:"reports"`
	// ClusterStats counts the ClusterStats in them.
	ClusterStats int64 `json:"cluster_stats"`
	// Requests sums their localities' total_issued_requests.
	Requests int64 `json:"requests"`
}

// lrsSink is a load reporting server that asks for every cluster at a fixed
// interval and counts what it receives. Safe for concurrent use.
type lrsSink struct {
	lrsv3.UnimplementedLoadReportingServiceServer
	resp                              *lrsv3.LoadStatsResponse
	streams, reports, stats, requests atomic.Int64
}

func (l *lrsSink) StreamLoadStats(ss lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	l.streams.Add(1)
	for first := true; ; first = false {
		req, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if cs := req.GetClusterStats(); len(cs) > 0 {
			l.reports.Add(1)
			l.stats.Add(int64(len(cs)))
			for _, c := range cs {
				for _, ls := range c.GetUpstreamLocalityStats() {
					l.requests.Add(int64(ls.GetTotalIssuedRequests()))
				}
			}
		}
		if first {
			if err := ss.Send(l.resp); err != nil {
				return err
			}
		}
	}
}

func newLRSSink(cfg ServerConfig) *lrsSink {
	return &lrsSink{resp: &lrsv3.LoadStatsResponse{SendAllClusters: true,
		LoadReportingInterval: durationpb.New(cfg.LoadReportInterval)}}
}

// LoadStats returns what the load reporting service received so far (zero
// without ServerConfig.LoadReportInterval).
func (s *Server) LoadStats() LoadStats {
	if s.lrs == nil {
		return LoadStats{}
	}
	return LoadStats{Streams: s.lrs.streams.Load(), Reports: s.lrs.reports.Load(), ClusterStats: s.lrs.stats.Load(),
		Requests: s.lrs.requests.Load()}
}
