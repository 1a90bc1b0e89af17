package oracle

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

// escapedPrefix names the clusters of the authority that Envoy spells with
// a percent-encoded ':' in the id (Dims.Escaped); the upstream names them
// the same way. The number the model appends is the port.
const escapedPrefix = "xdstp://" + authority + "/envoy.config.cluster.v3.Cluster/svc%3A"

// edsName is the name of a cluster's endpoints: the cluster's own, or for an
// xdstp cluster the same id under the endpoints' type.
func edsName(cluster string) string {
	return strings.Replace(cluster, "/envoy.config.cluster.v3.Cluster/", "/envoy.config.endpoint.v3.ClusterLoadAssignment/", 1)
}

// replaceDefault replaces a cluster's default variant by its constrained
// one in one snapshot (TP2: removed_resources of the unconstrained variant
// and the creation of the constrained replacement in one response), or
// brings a replaced default variant back.
func (m *model) replaceDefault(rng *rand.Rand) string {
	cs := slices.Sorted(maps.Keys(m.clusters))
	c := cs[rng.IntN(len(cs))]
	g := m.clusters[c]
	if g.noDefault {
		g.noDefault = false
		g.gen = m.content()
		return "cluster " + c + ": default variant back"
	}
	g.noDefault = true
	if g.prod == 0 {
		g.prod, g.prodEndpoint = m.content(), m.content()
	}
	return "cluster " + c + ": default variant replaced by env=prod"
}

// Breaks reports whether the upstream itself left the referrer (rname, renv)
// with content rhash of rtype without the variant of name it refers to (of
// typeURL, for env): make before break is owed only where it kept it.
func (w *World) Breaks(rtype, rname, renv, rhash, typeURL, name, env string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.snaps {
		if s.Select(typeURL, name, env) != nil {
			continue
		}
		for _, r := range s.Res[rtype][rname] {
			if r.Env == renv && r.Hash == rhash {
				return true
			}
		}
	}
	return false
}

// OpBulk adds N unreferenced clusters (and their endpoints) in one snapshot:
// a fleet of more than 10,000 names (Dims.Large).
const OpBulk Op = "bulk"

// bulk adds n plain clusters, without TP2 variants or do_not_cache.
func (m *model) bulk(n int) {
	for range n {
		m.clusters[m.name("c")] = &clusterGen{gen: m.content(), eds: m.content()}
	}
}
