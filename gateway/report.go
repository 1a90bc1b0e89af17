package gateway

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// Bounds of the status reports kept.
const (
	maxReportNodes   = 100000 // latest report per node (LRU)
	maxPendingReport = 10000  // reports waiting to be forwarded; past it the oldest is dropped
	forwardTimeout   = 5 * time.Second
)

// Report is the latest status report of one data plane, in /debug/gateway.
type Report struct {
	NodeID     string    `json:"node_id"`
	Version    string    `json:"version"`
	Ready      bool      `json:"ready"`
	Message    string    `json:"message,omitempty"`
	ObservedAt time.Time `json:"observed_at,omitzero"`
	ReceivedAt time.Time `json:"received_at"`
	// Forwarded is "pending", "forwarded" or "failed".
	Forwarded string `json:"forwarded"`
}

// reporter keeps the latest report per node and forwards every report
// upstream: pending reports are coalesced per node (the control plane needs
// each data plane's latest state), sent one at a time by the forwarder, each
// tried at most ReportRetries times.
type reporter struct {
	s    *Server
	wake chan struct{} // one slot: a report is pending

	mu      sync.Mutex
	latest  *simplelru.LRU[string, *Report]    // guarded by mu: by node id
	counts  map[[2]string]int                  // guarded by mu: (version, ready) → data planes
	pending map[string]*controlv1.StatusReport // guarded by mu: by node id
	order   []string                           // guarded by mu: pending node ids, oldest first
}

func newReporter(s *Server) *reporter {
	r := &reporter{s: s, wake: make(chan struct{}, 1), counts: make(map[[2]string]int),
		pending: make(map[string]*controlv1.StatusReport)}
	r.latest, _ = simplelru.NewLRU[string, *Report](maxReportNodes, func(_ string, old *Report) { r.uncount(old) })
	return r
}

// reportHandler is ReportStatus: answered at once, the report recorded and
// queued for the upstream.
func (s *Server) reportHandler(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	req := new(controlv1.StatusReport)
	if err := dec(req); err != nil {
		return nil, err
	}
	if req.GetNodeId() == "" {
		s.m.RejectedRequests.WithLabelValues("node").Inc()
		return nil, status.Error(codes.InvalidArgument, "xds-relay: node_id is required")
	}
	if az := s.opts.Authorize; az != nil {
		p := &authz.Principal{NodeID: req.GetNodeId()}
		p.SPIFFEID, p.URISANs, p.MTLS = tlsconfig.PeerIdentity(ctx)
		if err := az(p, StatusReportType, req.GetNodeId()); err != nil {
			s.m.RejectedRequests.WithLabelValues("permission_denied").Inc()
			return nil, status.Errorf(codes.PermissionDenied, "xds-relay: not allowed to report status: %v", err)
		}
	}
	s.reports.record(req)
	return &controlv1.StatusAck{Accepted: true}, nil
}

func readyLabel(ready bool) string { return strconv.FormatBool(ready) }

// status returns node's latest report for /debug/clients, nil for none.
func (r *reporter) status(node string) *downstream.StatusReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.latest.Peek(node)
	if !ok {
		return nil
	}
	return &downstream.StatusReport{Version: rep.Version, Ready: rep.Ready, Message: rep.Message, ReceivedAt: rep.ReceivedAt}
}

// record keeps req as its node's latest report and queues it.
func (r *reporter) record(req *controlv1.StatusReport) {
	rep := &Report{NodeID: req.GetNodeId(), Version: req.GetVersion(), Ready: req.GetReady(), Message: req.GetMessage(),
		ReceivedAt: time.Now(), Forwarded: "pending"}
	if req.GetObservedAt() != nil {
		rep.ObservedAt = req.GetObservedAt().AsTime()
	}
	r.s.m.GatewayReports.WithLabelValues("received").Inc()
	r.mu.Lock()
	if old, ok := r.latest.Peek(rep.NodeID); ok {
		r.uncount(old)
	}
	r.latest.Add(rep.NodeID, rep)
	r.count(rep, 1)
	if _, queued := r.pending[rep.NodeID]; !queued {
		r.order = append(r.order, rep.NodeID)
	}
	r.pending[rep.NodeID] = proto.Clone(req).(*controlv1.StatusReport)
	if len(r.order) > maxPendingReport {
		oldest := r.order[0]
		r.order = r.order[1:]
		delete(r.pending, oldest)
		r.s.m.GatewayReports.WithLabelValues("dropped").Inc()
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// count adds d to the data planes of rep's (version, ready), keeping the
// gauge's label sets to the versions the fleet runs. Called with mu held.
func (r *reporter) count(rep *Report, d int) {
	k := [2]string{rep.Version, readyLabel(rep.Ready)}
	r.counts[k] += d
	if r.counts[k] <= 0 {
		delete(r.counts, k)
		r.s.m.GatewayDataplanes.DeleteLabelValues(k[0], k[1])
		return
	}
	r.s.m.GatewayDataplanes.WithLabelValues(k[0], k[1]).Set(float64(r.counts[k]))
}

func (r *reporter) uncount(rep *Report) { r.count(rep, -1) }

// run forwards pending reports until the server closes.
func (r *reporter) run() {
	for {
		select {
		case <-r.s.ctx.Done():
			return
		case <-r.wake:
		}
		for {
			r.mu.Lock()
			if len(r.order) == 0 {
				r.mu.Unlock()
				break
			}
			node := r.order[0]
			r.order = r.order[1:]
			req := r.pending[node]
			delete(r.pending, node)
			r.mu.Unlock()
			result := "forwarded"
			if !r.forward(req) {
				result = "failed"
			}
			if r.s.ctx.Err() != nil {
				return
			}
			r.s.m.GatewayReports.WithLabelValues(result).Inc()
			r.mu.Lock()
			if rep, ok := r.latest.Peek(node); ok && rep.Forwarded == "pending" && rep.Version == req.GetVersion() {
				rep.Forwarded = result
			}
			r.mu.Unlock()
		}
	}
}

// forward sends one report upstream: each attempt to the next server in
// order, at most ReportRetries attempts with a doubling pause between them.
func (r *reporter) forward(req *controlv1.StatusReport) bool {
	pause := 100 * time.Millisecond
	for attempt := range r.s.opts.ReportRetries {
		i := attempt % len(r.s.opts.Upstreams)
		cc, err := r.s.conn(i)
		if err == nil {
			ctx, cancel := context.WithTimeout(r.s.ctx, forwardTimeout)
			ack := new(controlv1.StatusAck)
			err = cc.Invoke(ctx, controlv1.ConfigurationDiscoveryService_ReportStatus_FullMethodName, req, ack)
			cancel()
			if err == nil {
				return true
			}
		}
		r.s.log.Debug("status report not forwarded", zap.String("node", req.GetNodeId()), zap.Int("attempt", attempt+1), zap.Error(err))
		if attempt+1 == r.s.opts.ReportRetries {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-r.s.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		pause *= 2
	}
	r.s.log.Info("status report dropped after retries", zap.String("node", req.GetNodeId()), zap.Int("attempts", r.s.opts.ReportRetries))
	return false
}

// Reports returns the latest report of each node (those of nodeID when it
// is non-empty), sorted by node id, at most limit.
func (r *reporter) Reports(nodeID string, limit int) []Report {
	r.mu.Lock()
	var out []Report
	for _, k := range r.latest.Keys() {
		if nodeID != "" && k != nodeID {
			continue
		}
		if rep, ok := r.latest.Peek(k); ok {
			out = append(out, *rep)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.NodeID, b.NodeID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
