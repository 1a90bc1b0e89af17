package lrs

import (
	"math"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds of an Aggregator's state, whatever clients send.
const (
	// DefaultMaxKeys bounds the (cluster, service, locality) and endpoint
	// entries of an aggregate.
	DefaultMaxKeys = 10000
	// maxNames bounds the named metrics and drop categories of one entry.
	maxNames = 64
)

// Reasons a client's stats, or part of them, are not aggregated: the values
// of the reason label of xds_relay_lrs_stats_dropped_total.
const (
	DropLimit   = "limit"   // beyond the bound of keys or names
	DropInvalid = "invalid" // a non-finite metric value
	DropDenied  = "denied"  // a cluster the client may not subscribe to
)

// Aggregator sums the load reports of many clients into one report: per
// (cluster, cluster_service_name, locality) and, when endpoint granularity
// is asked for, per endpoint address. Counters are deltas since each
// client's previous report (load_stats.proto), so they are summed;
// total_requests_in_progress and total_active_connections are each
// client's latest value, summed over the connected clients.
//
// All methods are safe for concurrent use.
type Aggregator struct {
	// set at creation, read-only
	maxKeys int
	onDrop  func(reason string, n int) // called without mu held

	mu sync.Mutex
	// guarded by mu
	since    time.Time                     // start of the interval the counters cover
	clusters map[clusterKey]*clusterAgg    // counters since the last Take
	gauges   map[uint64]map[gaugeKey]gauge // per client: its latest gauges
	keys     int                           // locality and endpoint entries in clusters
}

// NewAggregator returns an empty aggregate starting now. maxKeys bounds its
// entries (<= 0: DefaultMaxKeys); onDrop, when set, is told what is not
// aggregated and why (one of the Drop* reasons).
func NewAggregator(maxKeys int, onDrop func(reason string, n int)) *Aggregator {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if onDrop == nil {
		onDrop = func(string, int) {}
	}
	return &Aggregator{maxKeys: maxKeys, onDrop: onDrop, since: time.Now(),
		clusters: map[clusterKey]*clusterAgg{}, gauges: map[uint64]map[gaugeKey]gauge{}}
}

type clusterKey struct{ cluster, service string }

// gaugeKey is where a client's gauge applies: a locality, or one of its
// endpoints (endpoint "" for the locality itself).
type gaugeKey struct {
	cluster  clusterKey
	locality string
	endpoint string
}

// gauge is a client's latest gauges at one key.
type gauge struct{ inProgress, activeConns uint64 }

// clusterAgg is one cluster's counters since the last Take.
type clusterAgg struct {
	dropped    map[string]uint64 // by category
	totalDrops uint64
	localities map[string]*localityAgg
}

// localityAgg is one locality's counters since the last Take.
type localityAgg struct {
	locality            *corev3.Locality
	priority            uint32
	counters            counters
	gauge               gauge // summed over the clients at Take
	newConns, failConns uint64
	cpu, mem, app       metricSum
	endpoints           map[string]*endpointAgg
}

// endpointAgg is one endpoint's counters since the last Take.
type endpointAgg struct {
	address  *corev3.Address
	counters counters
	gauge    gauge // summed over the clients at Take
}

// counters are the request counters and named metrics a locality and an
// endpoint share.
type counters struct {
	success, errors, issued uint64
	metrics                 map[string]*metricSum
}

// metricSum is a summed EndpointLoadMetricStats.
type metricSum struct {
	n     uint64
	total float64
}

// add returns a+b, saturated at the largest uint64.
func add(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// localityKey is the identity of a locality: region, zone, sub_zone.
func localityKey(l *corev3.Locality) string {
	return strings.Join([]string{l.GetRegion(), l.GetZone(), l.GetSubZone()}, "\x00")
}

// endpointKey is the identity of an endpoint: "a" and its address,
// serialized deterministically (never "", the locality's own gauge key).
func endpointKey(a *corev3.Address) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	return "a" + string(b)
}

// Add sums one report of client into the aggregate. Endpoint stats are kept
// only with granularity. Stats beyond the bounds are dropped and counted.
func (a *Aggregator) Add(client uint64, stats []*endpointv3.ClusterStats, granularity bool) {
	d := drops{}
	a.mu.Lock()
	for _, cs := range stats {
		a.addClusterLocked(client, cs, granularity, d)
	}
	a.mu.Unlock()
	d.report(a.onDrop)
}

// drops counts what one Add did not aggregate, by reason.
type drops map[string]int

func (d drops) report(f func(string, int)) {
	for r, n := range d {
		f(r, n)
	}
}

func (a *Aggregator) addClusterLocked(client uint64, cs *endpointv3.ClusterStats, granularity bool, d drops) {
	ck := clusterKey{cs.GetClusterName(), cs.GetClusterServiceName()}
	c := a.clusters[ck]
	if c == nil {
		if a.keys >= a.maxKeys {
			d[DropLimit] += 1 + len(cs.GetUpstreamLocalityStats())
			return
		}
		a.keys++
		c = &clusterAgg{dropped: map[string]uint64{}, localities: map[string]*localityAgg{}}
		a.clusters[ck] = c
	}
	c.totalDrops = add(c.totalDrops, cs.GetTotalDroppedRequests())
	for _, dr := range cs.GetDroppedRequests() {
		if _, ok := c.dropped[dr.GetCategory()]; !ok && len(c.dropped) >= maxNames {
			d[DropLimit]++
			continue
		}
		c.dropped[dr.GetCategory()] = add(c.dropped[dr.GetCategory()], dr.GetDroppedCount())
	}
	for _, ls := range cs.GetUpstreamLocalityStats() {
		a.addLocalityLocked(client, ck, c, ls, granularity, d)
	}
}

func (a *Aggregator) addLocalityLocked(client uint64, ck clusterKey, c *clusterAgg, ls *endpointv3.UpstreamLocalityStats,
	granularity bool, d drops) {
	lk := localityKey(ls.GetLocality())
	l := c.localities[lk]
	if l == nil {
		if a.keys >= a.maxKeys {
			d[DropLimit]++
			return
		}
		a.keys++
		l = &localityAgg{locality: &corev3.Locality{Region: ls.GetLocality().GetRegion(), Zone: ls.GetLocality().GetZone(),
			SubZone: ls.GetLocality().GetSubZone()}}
		c.localities[lk] = l
	}
	l.priority = ls.GetPriority()
	l.counters.add(ls.GetTotalSuccessfulRequests(), ls.GetTotalErrorRequests(), ls.GetTotalIssuedRequests(),
		ls.GetLoadMetricStats(), d)
	l.newConns = add(l.newConns, ls.GetTotalNewConnections())
	l.failConns = add(l.failConns, ls.GetTotalFailConnections())
	l.cpu.add(ls.GetCpuUtilization().GetNumRequestsFinishedWithMetric(), ls.GetCpuUtilization().GetTotalMetricValue(), d)
	l.mem.add(ls.GetMemUtilization().GetNumRequestsFinishedWithMetric(), ls.GetMemUtilization().GetTotalMetricValue(), d)
	l.app.add(ls.GetApplicationUtilization().GetNumRequestsFinishedWithMetric(),
		ls.GetApplicationUtilization().GetTotalMetricValue(), d)
	a.setGaugeLocked(client, gaugeKey{ck, lk, ""}, gauge{ls.GetTotalRequestsInProgress(), ls.GetTotalActiveConnections()}, d)
	if !granularity {
		return
	}
	for _, es := range ls.GetUpstreamEndpointStats() {
		a.addEndpointLocked(client, ck, lk, l, es, d)
	}
}

func (a *Aggregator) addEndpointLocked(client uint64, ck clusterKey, lk string, l *localityAgg,
	es *endpointv3.UpstreamEndpointStats, d drops) {
	ek := endpointKey(es.GetAddress())
	e := l.endpoints[ek]
	if e == nil {
		if a.keys >= a.maxKeys {
			d[DropLimit]++
			return
		}
		a.keys++
		if l.endpoints == nil {
			l.endpoints = map[string]*endpointAgg{}
		}
		e = &endpointAgg{}
		if es.GetAddress() != nil {
			e.address = proto.Clone(es.GetAddress()).(*corev3.Address)
		}
		l.endpoints[ek] = e
	}
	e.counters.add(es.GetTotalSuccessfulRequests(), es.GetTotalErrorRequests(), es.GetTotalIssuedRequests(),
		es.GetLoadMetricStats(), d)
	a.setGaugeLocked(client, gaugeKey{ck, lk, ek}, gauge{inProgress: es.GetTotalRequestsInProgress()}, d)
}

func (c *counters) add(success, errors, issued uint64, ms []*endpointv3.EndpointLoadMetricStats, d drops) {
	c.success = add(c.success, success)
	c.errors = add(c.errors, errors)
	c.issued = add(c.issued, issued)
	for _, m := range ms {
		s := c.metrics[m.GetMetricName()]
		if s == nil {
			if len(c.metrics) >= maxNames {
				d[DropLimit]++
				continue
			}
			if c.metrics == nil {
				c.metrics = map[string]*metricSum{}
			}
			s = &metricSum{}
			c.metrics[m.GetMetricName()] = s
		}
		s.add(m.GetNumRequestsFinishedWithMetric(), m.GetTotalMetricValue(), d)
	}
}

// add sums one metric; a non-finite value is dropped (it would poison the
// sum).
func (s *metricSum) add(n uint64, v float64, d drops) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d[DropInvalid]++
		return
	}
	s.n = add(s.n, n)
	if t := s.total + v; !math.IsInf(t, 0) {
		s.total = t
	} else {
		s.total = math.Copysign(math.MaxFloat64, t)
	}
}

// setGaugeLocked records a client's latest gauge at k (a zero one is
// forgotten); the gauges a client keeps are bounded as the keys are.
func (a *Aggregator) setGaugeLocked(client uint64, k gaugeKey, g gauge, d drops) {
	m := a.gauges[client]
	if g == (gauge{}) {
		delete(m, k)
		return
	}
	if m == nil {
		m = map[gaugeKey]gauge{}
		a.gauges[client] = m
	}
	if _, ok := m[k]; !ok && len(m) >= a.maxKeys {
		d[DropLimit]++
		return
	}
	m[k] = g
}

// Forget removes a client's gauges: a client whose stream ended contributes
// nothing further. Its counters, already summed, stay.
func (a *Aggregator) Forget(client uint64) {
	a.mu.Lock()
	delete(a.gauges, client)
	a.mu.Unlock()
}

// Take returns the aggregate of the interval since the previous Take (or
// the start) and starts a new interval at now. Only the clusters keep (nil:
// every cluster) are reported; the others' counters are discarded. It
// returns nil when the interval had no load: no counter moved and no
// request is in progress.
func (a *Aggregator) Take(now time.Time, keep func(cluster string) bool) []*endpointv3.ClusterStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	interval := durationpb.New(now.Sub(a.since))
	a.since = now
	a.addGaugesLocked()
	var out []*endpointv3.ClusterStats
	for ck, c := range a.clusters {
		if keep != nil && !keep(ck.cluster) {
			continue
		}
		if cs := c.stats(ck); cs != nil {
			cs.LoadReportInterval = interval
			out = append(out, cs)
		}
	}
	a.clusters, a.keys = map[clusterKey]*clusterAgg{}, 0
	sortStats(out)
	return out
}

// Clusters returns the distinct cluster names of the interval in flight.
func (a *Aggregator) Clusters() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[string]bool, len(a.clusters))
	out := make([]string, 0, len(a.clusters))
	for ck := range a.clusters {
		if !seen[ck.cluster] {
			seen[ck.cluster] = true
			out = append(out, ck.cluster)
		}
	}
	return out
}
