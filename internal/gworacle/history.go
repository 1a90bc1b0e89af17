package gworacle

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
)

// types are the resource types of the world's snapshots; every data plane
// subscribes to all of them.
var types = []string{controlv1.ListenerType, controlv1.HttpRouteType, controlv1.BackendClusterType}

// pool is how many names of each type a cluster may have.
const pool = 5

// model is the control plane's configuration of each cluster: by type, the
// generation of each name present (every change takes a fresh generation,
// so that content, and so its hash, is never published twice).
type model struct {
	gen      int
	clusters []map[string]map[int]int // cluster → type → name index → generation
}

func newModel(clusters int, rng *rand.Rand) *model {
	m := &model{}
	for range clusters {
		c := map[string]map[int]int{}
		for _, t := range types {
			c[t] = map[int]int{}
			for i := range pool {
				if rng.IntN(2) == 0 {
					m.gen++
					c[t][i] = m.gen
				}
			}
		}
		m.clusters = append(m.clusters, c)
	}
	return m
}

// mutate adds, changes or removes one resource of cluster c.
func (m *model) mutate(c int, rng *rand.Rand) {
	byName := m.clusters[c][types[rng.IntN(len(types))]]
	i := rng.IntN(pool)
	if _, ok := byName[i]; ok && rng.IntN(3) == 0 {
		delete(byName, i)
		return
	}
	m.gen++
	byName[i] = m.gen
}

// touchAll changes one resource of every type of cluster c (the final publish).
func (m *model) touchAll(c int) {
	for _, t := range types {
		m.gen++
		m.clusters[c][t][0] = m.gen
	}
}

// snapshot builds cluster c's snapshot.
func (m *model) snapshot(c int) *controlv1.ConfigSnapshot {
	snap := &controlv1.ConfigSnapshot{Id: clusterName(c)}
	cl := m.clusters[c]
	for _, i := range sortedInts(cl[controlv1.ListenerType]) {
		g := strconv.Itoa(cl[controlv1.ListenerType][i])
		snap.Listeners = append(snap.Listeners, &controlv1.Listener{Name: fmt.Sprintf("l%d", i), Port: uint32(8000 + i),
			Address: "0.0.0.0", Metadata: map[string]string{"gen": g}})
	}
	for _, i := range sortedInts(cl[controlv1.HttpRouteType]) {
		g := strconv.Itoa(cl[controlv1.HttpRouteType][i])
		snap.HttpRoutes = append(snap.HttpRoutes, &controlv1.HttpRoute{Namespace: "default", Name: fmt.Sprintf("r%d", i),
			Labels: map[string]string{"gen": g}})
	}
	for _, i := range sortedInts(cl[controlv1.BackendClusterType]) {
		g := cl[controlv1.BackendClusterType][i]
		snap.Backends = append(snap.Backends, &controlv1.BackendCluster{Name: fmt.Sprintf("b%d", i), Namespace: "default",
			Protocol: "http" + strconv.Itoa(g)})
	}
	return snap
}

func sortedInts(m map[int]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func clusterName(c int) string { return fmt.Sprintf("c%d", c) }

// published is one snapshot the control plane published for a cluster.
type published struct {
	version string
	snap    *controlv1.ConfigSnapshot
	res     map[string]map[string]string // type → name → version (content hash)
}

// history is everything the control plane published, per cluster, in
// order. Safe for concurrent use.
type history struct {
	mu    sync.Mutex
	byCl  map[string][]*published
	index map[string]int // version → its index in its cluster's list
}

func newHistory() *history { return &history{byCl: map[string][]*published{}, index: map[string]int{}} }

// publish sets cluster's snapshot at the control plane and records it.
func (h *history) publish(cp *gatewaycp.Server, cluster string, snap *controlv1.ConfigSnapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &published{version: cp.Set(cluster, snap), snap: proto.Clone(snap).(*controlv1.ConfigSnapshot), res: map[string]map[string]string{}}
	for _, t := range types {
		p.res[t] = cp.Resources(cluster, t)
	}
	h.index[p.version] = len(h.byCl[cluster])
	h.byCl[cluster] = append(h.byCl[cluster], p)
}

// indexOf returns the index of a snapshot version of cluster (-1: not one).
func (h *history) indexOf(cluster, version string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, ok := h.index[version]
	if !ok || i >= len(h.byCl[cluster]) || h.byCl[cluster][i].version != version {
		return -1
	}
	return i
}

func (h *history) at(cluster string, i int) *published {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byCl[cluster][i]
}

func (h *history) latest(cluster string) *published {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.byCl[cluster]
	return l[len(l)-1]
}

// back returns cluster's snapshot of n publishes ago (the first one if
// there were fewer).
func (h *history) back(cluster string, n int) *published {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.byCl[cluster]
	return l[max(len(l)-1-n, 0)]
}

// span returns the first and last index at which name of t had version v
// in cluster (ok false: never).
func (h *history) span(cluster, t, name, v string) (first, last int, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first = -1
	for i, p := range h.byCl[cluster] {
		if p.res[t][name] == v {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return first, last, first >= 0
}

// currentIn reports whether name of t had version v ("": was absent) at some
// index in [lo, hi].
func (h *history) currentIn(cluster, t, name, v string, lo, hi int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.byCl[cluster]
	for i := max(lo, 0); i <= hi && i < len(l); i++ {
		if l[i].res[t][name] == v {
			return true
		}
	}
	return false
}
