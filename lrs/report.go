package lrs

import (
	"cmp"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
)

// addGaugesLocked adds every connected client's latest gauges to the
// entries they apply to, creating those that counted nothing this
// interval (bounded by maxKeys).
func (a *Aggregator) addGaugesLocked() {
	for _, m := range a.gauges {
		for k, g := range m {
			if l := a.localityLocked(k); l != nil {
				if k.endpoint == "" {
					l.gauge = sumGauges(l.gauge, g)
				} else if e := a.endpointLocked(l, k.endpoint); e != nil {
					e.gauge = sumGauges(e.gauge, g)
				}
			}
		}
	}
}

func sumGauges(a, b gauge) gauge {
	return gauge{add(a.inProgress, b.inProgress), add(a.activeConns, b.activeConns)}
}

// localityLocked returns the entry of k's locality, created when absent
// and the bound allows; nil otherwise.
func (a *Aggregator) localityLocked(k gaugeKey) *localityAgg {
	c := a.clusters[k.cluster]
	if c == nil {
		if a.keys >= a.maxKeys {
			return nil
		}
		a.keys++
		c = &clusterAgg{dropped: map[string]uint64{}, localities: map[string]*localityAgg{}}
		a.clusters[k.cluster] = c
	}
	l := c.localities[k.locality]
	if l == nil {
		if a.keys >= a.maxKeys {
			return nil
		}
		a.keys++
		r, rest, _ := strings.Cut(k.locality, "\x00")
		z, sz, _ := strings.Cut(rest, "\x00")
		l = &localityAgg{locality: &corev3.Locality{Region: r, Zone: z, SubZone: sz}}
		c.localities[k.locality] = l
	}
	return l
}

// endpointLocked returns l's entry of the endpoint ek, created when absent
// and the bound allows; nil otherwise.
func (a *Aggregator) endpointLocked(l *localityAgg, ek string) *endpointAgg {
	if e := l.endpoints[ek]; e != nil {
		return e
	}
	if a.keys >= a.maxKeys {
		return nil
	}
	var addr *corev3.Address
	if len(ek) > 1 {
		addr = &corev3.Address{}
		if err := proto.Unmarshal([]byte(ek[1:]), addr); err != nil {
			return nil
		}
	}
	a.keys++
	if l.endpoints == nil {
		l.endpoints = map[string]*endpointAgg{}
	}
	e := &endpointAgg{address: addr}
	l.endpoints[ek] = e
	return e
}

// stats is the cluster's ClusterStats, nil when it has no load.
func (c *clusterAgg) stats(ck clusterKey) *endpointv3.ClusterStats {
	cs := &endpointv3.ClusterStats{ClusterName: ck.cluster, ClusterServiceName: ck.service,
		TotalDroppedRequests: c.totalDrops}
	for cat, n := range c.dropped {
		if n == 0 {
			continue
		}
		cs.DroppedRequests = append(cs.DroppedRequests, &endpointv3.ClusterStats_DroppedRequests{Category: cat, DroppedCount: n})
	}
	slices.SortFunc(cs.DroppedRequests, func(a, b *endpointv3.ClusterStats_DroppedRequests) int {
		return strings.Compare(a.Category, b.Category)
	})
	for _, l := range c.localities {
		if ls := l.stats(); ls != nil {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, ls)
		}
	}
	slices.SortFunc(cs.UpstreamLocalityStats, func(a, b *endpointv3.UpstreamLocalityStats) int {
		return strings.Compare(localityKey(a.GetLocality()), localityKey(b.GetLocality()))
	})
	if len(cs.UpstreamLocalityStats) == 0 && cs.TotalDroppedRequests == 0 && len(cs.DroppedRequests) == 0 {
		return nil
	}
	return cs
}

// stats is the locality's UpstreamLocalityStats, nil when it has no load.
func (l *localityAgg) stats() *endpointv3.UpstreamLocalityStats {
	ls := &endpointv3.UpstreamLocalityStats{
		Locality:                l.locality,
		Priority:                l.priority,
		TotalSuccessfulRequests: l.counters.success,
		TotalErrorRequests:      l.counters.errors,
		TotalIssuedRequests:     l.counters.issued,
		TotalRequestsInProgress: l.gauge.inProgress,
		TotalActiveConnections:  l.gauge.activeConns,
		TotalNewConnections:     l.newConns,
		TotalFailConnections:    l.failConns,
		CpuUtilization:          l.cpu.unnamed(),
		MemUtilization:          l.mem.unnamed(),
		ApplicationUtilization:  l.app.unnamed(),
		LoadMetricStats:         l.counters.named(),
	}
	for _, e := range l.endpoints {
		if es := e.stats(); es != nil {
			ls.UpstreamEndpointStats = append(ls.UpstreamEndpointStats, es)
		}
	}
	slices.SortFunc(ls.UpstreamEndpointStats, func(a, b *endpointv3.UpstreamEndpointStats) int {
		return strings.Compare(endpointKey(a.GetAddress()), endpointKey(b.GetAddress()))
	})
	if l.counters.idle() && l.gauge == (gauge{}) && l.newConns == 0 && l.failConns == 0 && l.cpu.n == 0 &&
		l.mem.n == 0 && l.app.n == 0 && len(ls.UpstreamEndpointStats) == 0 {
		return nil
	}
	return ls
}

// stats is the endpoint's UpstreamEndpointStats, nil when it has no load.
func (e *endpointAgg) stats() *endpointv3.UpstreamEndpointStats {
	if e.counters.idle() && e.gauge == (gauge{}) {
		return nil
	}
	return &endpointv3.UpstreamEndpointStats{
		Address:                 e.address,
		TotalSuccessfulRequests: e.counters.success,
		TotalErrorRequests:      e.counters.errors,
		TotalIssuedRequests:     e.counters.issued,
		TotalRequestsInProgress: e.gauge.inProgress,
		LoadMetricStats:         e.counters.named(),
	}
}

func (c *counters) idle() bool {
	return c.success == 0 && c.errors == 0 && c.issued == 0 && len(c.named()) == 0
}

// named is the counters' load_metric_stats, sorted by name.
func (c *counters) named() []*endpointv3.EndpointLoadMetricStats {
	var out []*endpointv3.EndpointLoadMetricStats
	for name, s := range c.metrics {
		if s.n == 0 && s.total == 0 {
			continue
		}
		out = append(out, &endpointv3.EndpointLoadMetricStats{MetricName: name,
			NumRequestsFinishedWithMetric: s.n, TotalMetricValue: s.total})
	}
	slices.SortFunc(out, func(a, b *endpointv3.EndpointLoadMetricStats) int {
		return strings.Compare(a.MetricName, b.MetricName)
	})
	return out
}

// unnamed is the sum as an UnnamedEndpointLoadMetricStats, nil when empty.
func (s *metricSum) unnamed() *endpointv3.UnnamedEndpointLoadMetricStats {
	if s.n == 0 && s.total == 0 {
		return nil
	}
	return &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: s.n, TotalMetricValue: s.total}
}

// sortStats orders a report by cluster and service name, so that reports
// compare in tests and read well in logs.
func sortStats(out []*endpointv3.ClusterStats) {
	slices.SortFunc(out, func(a, b *endpointv3.ClusterStats) int {
		return cmp.Or(strings.Compare(a.ClusterName, b.ClusterName),
			strings.Compare(a.ClusterServiceName, b.ClusterServiceName))
	})
}
