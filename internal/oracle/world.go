package oracle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
)

// The types of the world, in xDS order.
var worldTypes = []string{keying.ClusterType, keying.EndpointType, keying.ListenerType, keying.RouteType}

// Env is the TP2 parameter of the world's variants: a cluster and its
// endpoints may have a variant for env=prod beside the default one.
const (
	envParam = "env"
	envProd  = "prod"
)

// Res is one resource variant as the upstream publishes it. Immutable.
type Res struct {
	Type, Name string
	// Env is the variant's constraint env=Env; "" for the default variant
	// (no constraints).
	Env string
	// Body is the serialized resource; Hash identifies it.
	Body []byte
	Hash string
	// Refs are what it refers to, by type (from the generator's model, not
	// from parsing the body).
	Refs map[string][]string
	// DoNotCache marks the resource do_not_cache; Bad marks a version picky
	// clients NACK.
	DoNotCache, Bad bool
}

// Snapshot is the upstream's whole state at one index. Immutable.
type Snapshot struct {
	Index int
	// Res holds, by type and name, the variants (the default one first).
	Res map[string]map[string][]*Res
}

// Select returns the variant of name a subscriber with TP2 parameter env
// ("" for none) gets: the env variant when there is one, else the default
// variant; nil when the name does not exist.
func (s *Snapshot) Select(typeURL, name, env string) *Res {
	var def *Res
	for _, r := range s.Res[typeURL][name] {
		switch {
		case r.Env == "":
			def = r
		case r.Env == env:
			return r
		}
	}
	return def
}

// Names returns the names of typeURL, sorted.
func (s *Snapshot) Names(typeURL string) []string {
	return slices.Sorted(maps.Keys(s.Res[typeURL]))
}

// World is the upstream's history: every snapshot it ever published, in
// order. Safe for concurrent use.
type World struct {
	mu    sync.Mutex
	snaps []*Snapshot
	// published holds every (type, name, env, hash) ever published.
	published map[string]bool
	// at holds when each snapshot was published.
	at []time.Time
	// spans holds, by pubKey, the first and the last index at which the
	// variant had that content: the upstream's publication order.
	spans map[string][2]int
}

func newWorld() *World { return &World{published: map[string]bool{}, spans: map[string][2]int{}} }

func pubKey(typeURL, name, env, hash string) string {
	return typeURL + "\x00" + name + "\x00" + env + "\x00" + hash
}

// add appends s to the history.
func (w *World) add(s *Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.Index = len(w.snaps)
	w.snaps = append(w.snaps, s)
	w.at = append(w.at, time.Now())
	for t, byName := range s.Res {
		for n, vs := range byName {
			for _, r := range vs {
				k := pubKey(t, n, r.Env, r.Hash)
				w.published[k] = true
				sp, ok := w.spans[k]
				if !ok {
					sp[0] = s.Index
				}
				sp[1] = s.Index
				w.spans[k] = sp
			}
		}
	}
}

// Current returns the latest snapshot.
func (w *World) Current() *Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snaps[len(w.snaps)-1]
}

// Published reports whether the variant (name, env) of typeURL ever had the
// content hash.
func (w *World) Published(typeURL, name, env, hash string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.published[pubKey(typeURL, name, env, hash)]
}

// GoneSince reports whether the selection of name for env was ever absent
// at an index at or after the first one at which a variant of name had the
// content hash (hash "": since from): a removal of content hash is the
// upstream's word. Any variant, not only the one env selects: a TP2 caching
// proxy matches a new subscription against the variants it holds, so a
// client may hold the default variant while the upstream also has its own
// (found by seed 4401120: told the name was gone once the upstream had none).
func (w *World) GoneSince(typeURL, name, env, hash string, from int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := -1
	for _, s := range w.snaps {
		if s.Index < from {
			continue
		}
		r := s.Select(typeURL, name, env)
		if first < 0 && (hash == "" || slices.ContainsFunc(s.Res[typeURL][name], func(v *Res) bool { return v.Hash == hash })) {
			first = s.Index
		}
		if first >= 0 && r == nil {
			return true
		}
	}
	return false
}

// AbsentAt reports whether the selection of name for env is absent at index.
func (w *World) AbsentAt(typeURL, name, env string, index int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index < 0 || index >= len(w.snaps) {
		return false
	}
	return w.snaps[index].Select(typeURL, name, env) == nil
}

// refsOf returns what the published variant (name, env) with content hash
// refers to.
func (w *World) refsOf(typeURL, name, env, hash string) map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.snaps) - 1; i >= 0; i-- {
		for _, r := range w.snaps[i].Res[typeURL][name] {
			if r.Env == env && r.Hash == hash {
				return r.Refs
			}
		}
	}
	return nil
}

// Len is the number of snapshots published.
func (w *World) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.snaps)
}

// model is the generator's view of the world: listeners route to routes,
// routes to clusters, clusters to their endpoints (EDS name = cluster name).
// Every snapshot it builds is consistent: every reference resolves.
type model struct {
	listeners map[string]string // listener → route
	routes    map[string]string // route → cluster
	clusters  map[string]*clusterGen
	members   map[string]int // glob members → content generation (Dims.Glob)
	next      int            // names
	gen       int            // contents
	opts      WorldOptions
}

// clusterGen is a cluster's content generations.
type clusterGen struct {
	gen, eds     int
	prod         int  // TP2: the env=prod variant's generation, 0 for none
	bad          bool // this version is one picky clients NACK
	doNotCache   bool
	prodEndpoint int  // TP2: the env=prod endpoints' generation, 0 for none
	noDefault    bool // TP2: the default variant replaced by the constrained one (Dims.Replace)
}

// WorldOptions shape the generated resources.
type WorldOptions struct {
	TP2        bool // clusters and endpoints get env=prod variants
	DoNotCache bool // some clusters are do_not_cache
	Bad        bool // some cluster versions are bad (picky clients NACK them)
	Escaped    bool // some clusters are xdstp names spelled as Envoy does (Dims.Escaped)
}

func newModel(opts WorldOptions, rng *rand.Rand) *model {
	m := &model{listeners: map[string]string{}, routes: map[string]string{}, clusters: map[string]*clusterGen{}, opts: opts}
	for range 3 {
		m.addCluster(rng)
	}
	cs := slices.Sorted(maps.Keys(m.clusters))
	for i := range 2 {
		m.addListener(cs[i])
	}
	return m
}

func (m *model) name(prefix string) string {
	m.next++
	return fmt.Sprintf("%s%d", prefix, m.next)
}

func (m *model) content() int {
	m.gen++
	return m.gen
}

func (m *model) addCluster(rng *rand.Rand) string {
	c := m.name("c")
	if m.opts.Escaped && m.next%3 == 0 {
		c = m.name(escapedPrefix)
	}
	g := &clusterGen{gen: m.content(), eds: m.content()}
	if m.opts.TP2 && rng.IntN(2) == 0 {
		g.prod, g.prodEndpoint = m.content(), m.content()
	}
	if m.opts.DoNotCache && rng.IntN(4) == 0 {
		g.doNotCache = true
	}
	m.clusters[c] = g
	return c
}

func (m *model) addListener(cluster string) {
	l, r := m.name("l"), m.name("r")
	m.listeners[l] = r
	m.routes[r] = cluster
}

// gc drops the clusters no route refers to.
func (m *model) gc() {
	used := map[string]bool{}
	for _, c := range m.routes {
		used[c] = true
	}
	for c := range m.clusters {
		if !used[c] {
			delete(m.clusters, c)
		}
	}
}

// mutate makes one random change.
func (m *model) mutate(rng *rand.Rand) string {
	cs := slices.Sorted(maps.Keys(m.clusters))
	rs := slices.Sorted(maps.Keys(m.routes))
	ls := slices.Sorted(maps.Keys(m.listeners))
	switch k := rng.IntN(10); {
	case k < 3: // endpoints change
		c := cs[rng.IntN(len(cs))]
		m.clusters[c].eds = m.content()
		if m.clusters[c].prodEndpoint != 0 {
			m.clusters[c].prodEndpoint = m.content()
		}
		return "endpoints of " + c
	case k < 5: // cluster change, sometimes a bad version
		c := cs[rng.IntN(len(cs))]
		g := m.clusters[c]
		g.gen = m.content()
		g.bad = m.opts.Bad && rng.IntN(3) == 0
		if g.prod != 0 {
			g.prod = m.content()
		}
		return "cluster " + c
	case k < 7: // a route moves, to an existing or a new cluster; the old one may go
		r := rs[rng.IntN(len(rs))]
		to := cs[rng.IntN(len(cs))]
		if rng.IntN(2) == 0 || to == m.routes[r] {
			to = m.addCluster(rng)
		}
		m.routes[r] = to
		if rng.IntN(2) == 0 {
			m.gc()
		}
		return "route " + r + " to " + to
	case k < 8 && len(ls) < 4: // a listener (and its route) added
		m.addListener(cs[rng.IntN(len(cs))])
		return "listener added"
	case k < 9 && len(ls) > 1: // a listener (and its route, and unused clusters) removed
		l := ls[rng.IntN(len(ls))]
		delete(m.routes, m.listeners[l])
		delete(m.listeners, l)
		m.gc()
		return "listener " + l + " removed"
	default:
		for range 2 {
			m.addCluster(rng) // unreferenced clusters: only wildcard subscribers see them
		}
		return "clusters added"
	}
}

// newRes builds the variant (name, env) of typeURL with content msg.
func newRes(typeURL, name, env string, msg proto.Message, refs map[string][]string) *Res {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return &Res{Type: typeURL, Name: name, Env: env, Body: b, Hash: hex.EncodeToString(sum[:8]), Refs: refs}
}

// put adds r to the snapshot.
func (s *Snapshot) put(r *Res) {
	if s.Res[r.Type] == nil {
		s.Res[r.Type] = map[string][]*Res{}
	}
	s.Res[r.Type][r.Name] = append(s.Res[r.Type][r.Name], r)
}

// snapshot builds the model's state as a Snapshot.
func (m *model) snapshot() *Snapshot {
	s := &Snapshot{Res: map[string]map[string][]*Res{}}
	add := func(typeURL, name, env string, msg proto.Message, refs map[string][]string, g *clusterGen) {
		r := newRes(typeURL, name, env, msg, refs)
		if g != nil && typeURL == keying.ClusterType {
			r.DoNotCache, r.Bad = g.doNotCache, g.bad
		}
		s.put(r)
	}
	for n, gen := range m.members {
		s.put(memberCluster(n, gen))
	}
	for l, r := range m.listeners {
		add(keying.ListenerType, l, "", xdstest.GRPCListener(l, r), map[string][]string{keying.RouteType: {r}}, nil)
	}
	for r, c := range m.routes {
		add(keying.RouteType, r, "", xdstest.GRPCRoute(r, c), map[string][]string{keying.ClusterType: {c}}, nil)
	}
	for c, g := range m.clusters {
		e := edsName(c)
		cl := func(gen int) *clusterv3.Cluster {
			x := xdstest.EDSCluster(c, e)
			x.ConnectTimeout = durationpb.New(time.Duration(gen) * time.Millisecond)
			if g.bad {
				x.AltStatName = badMarker
			}
			return x
		}
		refs := map[string][]string{keying.EndpointType: {e}}
		if !g.noDefault {
			add(keying.ClusterType, c, "", cl(g.gen), refs, g)
		}
		add(keying.EndpointType, e, "", xdstest.Endpoints(e, fmt.Sprintf("127.0.0.1:%d", 10000+g.eds%50000)), nil, nil)
		if g.prod != 0 {
			add(keying.ClusterType, c, envProd, cl(g.prod), refs, g)
			add(keying.EndpointType, e, envProd, xdstest.Endpoints(e, fmt.Sprintf("127.0.0.1:%d", 10000+g.prodEndpoint%50000)), nil, nil)
		}
	}
	return s
}
