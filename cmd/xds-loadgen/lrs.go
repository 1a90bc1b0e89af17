package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// minLoadInterval bounds how often a client reports, whatever the server
// asks (a zero or tiny interval would make the load tool the bottleneck).
const minLoadInterval = 100 * time.Millisecond

// heldClusters is what a client's LRS goroutine reads of its xDS state: the
// clusters it holds, published by the client goroutine after each CDS
// response.
type heldClusters struct{ p atomic.Pointer[[]string] }

func (h *heldClusters) publish(names []string) { h.p.Store(&names) }

func (h *heldClusters) load() []string {
	if p := h.p.Load(); p != nil {
		return *p
	}
	return nil
}

// publishClusters publishes the clusters the client holds now. Called on
// the client goroutine.
func (c *client) publishClusters() {
	if c.e.cfg.LoadReport {
		c.held.publish(slices.Sorted(maps.Keys(c.st.types[fleet.Clusters].known)))
	}
}

// runLRS keeps a StreamLoadStats open on the client's connection until ctx
// is done (reconnecting with jittered backoff), and reports synthetic load
// for the clusters the client holds at the interval the server gives, as a
// gRPC client with lrs_server self does.
func (c *client) runLRS(ctx context.Context) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		answered, err := c.loadStream(ctx)
		if ctx.Err() != nil {
			return
		}
		c.e.ctr.lrsErrors.Add(1)
		if answered {
			backoff = minBackoff
		}
		c.e.log.Debug("LRS stream ended", zap.Int("client", c.id), zap.Error(err))
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// loadSettings is what the server asked for.
type loadSettings struct {
	all      bool
	clusters map[string]bool
	interval time.Duration
}

func settingsOf(r *lrsv3.LoadStatsResponse) *loadSettings {
	s := &loadSettings{all: r.GetSendAllClusters(), clusters: map[string]bool{},
		interval: max(r.GetLoadReportingInterval().AsDuration(), minLoadInterval)}
	for _, n := range r.GetClusters() {
		s.clusters[n] = true
	}
	return s
}

// loadStream runs one StreamLoadStats; it reports whether the server
// answered.
func (c *client) loadStream(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := lrsv3.NewLoadReportingServiceClient(c.conn).StreamLoadStats(ctx)
	if err != nil {
		return false, fmt.Errorf("loadgen: open LRS stream: %w", err)
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: c.node}); err != nil {
		return false, fmt.Errorf("loadgen: LRS send: %w", err)
	}
	first, err := st.Recv()
	if err != nil {
		return false, fmt.Errorf("loadgen: LRS receive: %w", err)
	}
	c.e.ctr.lrsStreams.Add(1)
	defer c.e.ctr.lrsStreams.Add(-1)
	var cur atomic.Pointer[loadSettings]
	cur.Store(settingsOf(first))
	ended := make(chan error, 1)
	go func() { // ends with the stream: cancel makes Recv return
		for {
			r, err := st.Recv()
			if err != nil {
				ended <- err
				return
			}
			cur.Store(settingsOf(r))
		}
	}()
	defer func() {
		cancel()
		<-ended
	}()
	last := time.Now()
	t := time.NewTimer(cur.Load().interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-ended:
			ended <- err // for the deferred wait
			return true, fmt.Errorf("loadgen: LRS receive: %w", err)
		case now := <-t.C:
			s := cur.Load()
			if stats := c.syntheticLoad(s, now.Sub(last)); len(stats) > 0 {
				if err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: stats}); err != nil {
					return true, fmt.Errorf("loadgen: LRS send: %w", err)
				}
				c.e.ctr.lrsReports.Add(1)
			}
			last = now
			t.Reset(s.interval)
		}
	}
}

// syntheticLoad is a small report of the clusters the client holds that s
// asks for: one locality (the node's), a few requests each.
func (c *client) syntheticLoad(s *loadSettings, interval time.Duration) []*endpointv3.ClusterStats {
	held := c.held.load()
	out := make([]*endpointv3.ClusterStats, 0, len(held))
	loc := c.node.GetLocality()
	for _, name := range held {
		if !s.all && !s.clusters[name] {
			continue
		}
		issued := uint64(1 + rand.N(10))
		errs := uint64(rand.N(2))
		out = append(out, &endpointv3.ClusterStats{
			ClusterName:          name,
			LoadReportInterval:   durationpb.New(interval),
			TotalDroppedRequests: 0,
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
				Locality:                &corev3.Locality{Region: loc.GetRegion(), Zone: loc.GetZone(), SubZone: loc.GetSubZone()},
				TotalSuccessfulRequests: issued - min(errs, issued),
				TotalErrorRequests:      min(errs, issued),
				TotalIssuedRequests:     issued,
				TotalRequestsInProgress: uint64(rand.N(3)),
			}},
		})
	}
	return out
}
