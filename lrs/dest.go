package lrs

import (
	"slices"
	"sync"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// Authority is an xdstp authority with servers of its own: the load of its
// clusters goes there.
type Authority struct {
	// Upstreams are the authority's servers, in order.
	Upstreams []Upstream
	// Current returns the URI of the server the relay's xDS stream for the
	// authority is on now (or tries). Nil or "": the first.
	Current func() string
}

// dest is where the load of some clusters goes: the default servers, or
// an authority's. Each has its aggregate and a forwarder (an authority's
// from its first report on).
type dest struct {
	// set at creation, read-only
	authority string // "" for the default servers
	upstreams []Upstream
	current   func() string
	agg       *Aggregator

	start sync.Once
	fw    *forwarder // set by start; read after start.Do or closeOnce

	// guarded by Server.mu
	settings settings
}

// defaultSettings is what the relay says before an upstream answered.
func (s *Server) defaultSettings() settings {
	return settings{all: true, interval: s.opts.DefaultInterval}
}

// newDests creates the destinations: the default servers and each
// authority with servers of its own.
func (s *Server) newDests() {
	s.dests = map[string]*dest{}
	add := func(auth string, ups []Upstream, cur func() string) {
		s.dests[auth] = &dest{authority: auth, upstreams: ups, current: cur, settings: s.defaultSettings(),
			agg: NewAggregator(s.opts.MaxKeys, func(reason string, n int) {
				s.m.LRSStatsDropped.WithLabelValues(reason).Add(float64(n))
			})}
	}
	add("", s.opts.Upstreams, s.opts.Current)
	for auth, a := range s.opts.Authorities {
		if len(a.Upstreams) > 0 {
			add(auth, a.Upstreams, a.Current)
		}
	}
	// The default servers are asked at once, so that clients learn their
	// wishes early; an authority's when a client reports one of its
	// clusters.
	s.startDest(s.dests[""])
}

func (s *Server) startDest(d *dest) { d.start.Do(func() { d.fw = newForwarder(s, d) }) }

// destOf returns where the load of cluster goes: its xdstp authority's
// servers when that authority has servers of its own, else the default
// servers.
func (s *Server) destOf(cluster string) *dest {
	if auth, ok := keying.Authority(cluster); ok {
		if d := s.dests[auth]; d != nil {
			return d
		}
	}
	return s.dests[""]
}

// add sums stats into their destinations' aggregates, starting the
// forwarders of those that had none.
func (s *Server) add(client uint64, stats []*endpointv3.ClusterStats) {
	by := map[*dest][]*endpointv3.ClusterStats{}
	for _, cs := range stats {
		d := s.destOf(cs.GetClusterName())
		by[d] = append(by[d], cs)
	}
	for d, st := range by {
		s.startDest(d)
		d.agg.Add(client, st, s.destSettings(d).granularity)
	}
}

func (s *Server) destSettings(d *dest) settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.settings
}

// closeDests stops the forwarders.
func (s *Server) closeDests() {
	for _, d := range s.dests {
		d.start.Do(func() {}) // none starts after this
		if d.fw != nil {
			d.fw.close()
		}
	}
}

// setSettings takes an upstream's wishes for d and tells every client
// stream when what they are told changed.
func (s *Server) setSettings(d *dest, resp *lrsv3.LoadStatsResponse) {
	st := settings{clusters: slices.Clone(resp.GetClusters()), all: resp.GetSendAllClusters(),
		interval: resp.GetLoadReportingInterval().AsDuration(), granularity: resp.GetReportEndpointGranularity()}
	if st.interval <= 0 {
		st.interval = s.opts.DefaultInterval
	}
	slices.Sort(st.clusters)
	s.mu.Lock()
	defer s.mu.Unlock()
	d.settings = st
	merged := s.mergeLocked()
	if merged.same(s.settings) {
		return
	}
	merged.version = s.settings.version + 1
	s.settings = merged
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
