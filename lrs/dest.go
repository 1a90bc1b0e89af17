package lrs

import (
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// Authority is an xdstp authority with servers of its own: the load of its
// clusters goes there.
type Authority struct {
	// Upstreams are the authority's servers, in order.
	Upstreams []Upstream
}

// maxDests bounds the destinations (node groups times authorities).
const maxDests = 1000

// destKey names a destination: an authority ("": the default servers) and
// a node group ("": none).
type destKey struct{ authority, group string }

// dest is where the load of some clusters of some clients goes: the
// default servers, or an authority's, for a node group. Each has its
// aggregate and a forwarder presenting its node.
type dest struct {
	// set at creation, read-only
	key       destKey
	node      *corev3.Node
	upstreams []Upstream
	agg       *Aggregator
	fw        *forwarder

	// guarded by Server.mu
	settings settings
	answered bool // the upstream has answered once
}

// defaultSettings is what the relay says before an upstream answered.
func (s *Server) defaultSettings() settings {
	return settings{all: true, interval: s.opts.DefaultInterval}
}

// destLocked returns the destination of k, created (with its forwarder)
// when absent; nil beyond maxDests or once closed.
func (s *Server) destLocked(k destKey, node *corev3.Node) *dest {
	if d := s.dests[k]; d != nil {
		return d
	}
	if s.closed || len(s.dests) >= maxDests {
		return nil
	}
	ups := s.opts.Upstreams
	if k.authority != "" {
		ups = s.opts.Authorities[k.authority].Upstreams
	}
	if node == nil {
		node = s.opts.Node
	}
	d := &dest{key: k, node: node, upstreams: ups, settings: s.defaultSettings(),
		agg: NewAggregator(s.opts.MaxKeys, func(reason string, n int) {
			s.m.LRSStatsDropped.WithLabelValues(reason).Add(float64(n))
		})}
	d.fw = newForwarder(s, d)
	s.dests[k] = d
	return d
}

// authorityOf returns the authority whose servers take the load of cluster:
// its xdstp authority when that has servers of its own, else "".
func (s *Server) authorityOf(cluster string) string {
	if auth, ok := keying.Authority(cluster); ok && len(s.opts.Authorities[auth].Upstreams) > 0 {
		return auth
	}
	return ""
}

// add sums stats of cs into their destinations' aggregates.
func (s *Server) add(cs *clientStream, stats []*endpointv3.ClusterStats) {
	by := map[string][]*endpointv3.ClusterStats{}
	for _, c := range stats {
		a := s.authorityOf(c.GetClusterName())
		by[a] = append(by[a], c)
	}
	for auth, st := range by {
		s.mu.Lock()
		d := s.destLocked(destKey{auth, cs.group}, cs.groupNode)
		var granularity bool
		if d != nil {
			granularity = d.settings.granularity
		}
		s.mu.Unlock()
		if d == nil {
			s.m.LRSStatsDropped.WithLabelValues(DropLimit).Add(float64(len(st)))
			continue
		}
		d.agg.Add(cs.id, st, granularity)
	}
}

func (s *Server) destSettings(d *dest) settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.settings
}

// allDests returns the destinations.
func (s *Server) allDests() []*dest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*dest, 0, len(s.dests))
	for _, d := range s.dests {
		out = append(out, d)
	}
	return out
}

// closeDests flushes and stops the forwarders, together; none starts
// after.
func (s *Server) closeDests() {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.mu.Unlock()
	if was {
		return
	}
	var wg sync.WaitGroup
	for _, d := range s.allDests() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.fw.close()
		}()
	}
	wg.Wait()
}

// setSettings takes an upstream's wishes for d and wakes every client
// stream: what they are told may have changed, or their first answer may
// wait for it.
func (s *Server) setSettings(d *dest, resp *lrsv3.LoadStatsResponse) {
	st := settings{clusters: slices.Clone(resp.GetClusters()), all: resp.GetSendAllClusters(),
		interval: resp.GetLoadReportingInterval().AsDuration(), granularity: resp.GetReportEndpointGranularity()}
	if st.interval <= 0 {
		st.interval = s.opts.DefaultInterval
	}
	slices.Sort(st.clusters)
	s.mu.Lock()
	defer s.mu.Unlock()
	d.settings, d.answered = st, true
	if merged := s.mergeLocked(); !merged.same(s.settings) {
		merged.version = s.settings.version + 1
		s.settings = merged
	}
	// Woken even when nothing changed: a first answer may wait for this.
	for _, cs := range s.streams {
		select {
		case cs.wake <- struct{}{}:
		default:
		}
	}
}

// mergeLocked is what clients are told: every cluster some destination
// asks for (all when one asks for all), at the shortest interval, with
// endpoint granularity when one asks for it.
func (s *Server) mergeLocked() settings {
	var m settings
	for _, d := range s.dests {
		st := d.settings
		if m.interval == 0 || st.interval < m.interval {
			m.interval = st.interval
		}
		m.all = m.all || st.all
		m.granularity = m.granularity || st.granularity
		m.clusters = append(m.clusters, st.clusters...)
	}
	if m.all {
		m.clusters = nil
	}
	slices.Sort(m.clusters)
	m.clusters = slices.Compact(m.clusters)
	return m
}

func (st settings) same(o settings) bool {
	return slices.Equal(st.clusters, o.clusters) && st.all == o.all && st.interval == o.interval &&
		st.granularity == o.granularity
}

// interval is d's upstream interval.
func (s *Server) interval(d *dest) time.Duration { return s.destSettings(d).interval }
