package xdstest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// GlobADS is a CDS control plane that expands xdstp glob collections, which
// go-control-plane does not, over SotW and Delta ADS: serve it with
// StartUpstream(tb, WithADS(g)). Set replaces its clusters and pushes the
// change to every stream: a SotW stream gets the full state of what it
// subscribes, a Delta stream the new clusters and removed_resources for
// those it was sent that are gone (it forgets what is unsubscribed), and,
// answering a glob's subscription, the glob itself when it has no member
// (xDS TP1). While paused (Pause) it answers nothing: a slow control plane.
type GlobADS struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer

	mu       sync.Mutex
	clusters []string
	paused   bool
	changed  chan struct{} // closed and replaced by every Set and Pause
}

// NewGlobADS returns a GlobADS serving the EDS clusters named clusters.
func NewGlobADS(clusters ...string) *GlobADS {
	return &GlobADS{clusters: slices.Clone(clusters), changed: make(chan struct{})}
}

// Set replaces the clusters and pushes the change to every stream.
func (g *GlobADS) Set(clusters ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.clusters = slices.Clone(clusters)
	g.wakeLocked()
}

// Pause stops (true) or resumes (false) every answer; resumed, each stream
// is answered what it missed.
func (g *GlobADS) Pause(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = paused
	g.wakeLocked()
}

func (g *GlobADS) wakeLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// matching returns the clusters that subscriptions names select (by name or
// by glob), sorted, and the channel the next Set or Pause closes; ok is false
// while paused.
func (g *GlobADS) matching(names map[string]bool) (sel []string, changed <-chan struct{}, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		return nil, g.changed, false
	}
	var out []string
	for _, c := range g.clusters {
		if selects(names, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out, g.changed, true
}

// selects reports whether the subscriptions names select the cluster c, by
// name or by glob.
func selects(names map[string]bool, c string) bool {
	u, err := keying.ParseURN(c)
	for n := range names {
		gl, gerr := keying.ParseURL(n)
		if n == c || (err == nil && gerr == nil && gl.IsGlob() && gl.Matches(u)) {
			return true
		}
	}
	return false
}

// received delivers what recv returns until it fails or ctx ends, so that a
// stream can wait for a request and a change at once.
func received[T any](ctx context.Context, recv func() (T, error)) <-chan T {
	out := make(chan T)
	go func() {
		defer close(out)
		for req, err := recv(); err == nil; req, err = recv() {
			select {
			case out <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// clusterAny is the cluster c as the GlobADS sends it.
func clusterAny(c string) *anypb.Any { return mustAny(EDSCluster(c, "eds-"+c)) }

// StreamAggregatedResources serves SotW: CDS requests set the subscription;
// a response goes out when the subscription or its clusters change.
func (g *GlobADS) StreamAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	reqs := received(s.Context(), s.Recv)
	names := map[string]bool{}
	last, nonce := "", 0
	for {
		sel, changed, ok := g.matching(names)
		if key := fmt.Sprint(slices.Sorted(maps.Keys(names)), sel); ok && len(names) > 0 && key != last {
			last, nonce = key, nonce+1
			resp := &discoverygrpc.DiscoveryResponse{TypeUrl: resource.ClusterType, VersionInfo: strconv.Itoa(nonce), Nonce: strconv.Itoa(nonce)}
			for _, c := range sel {
				resp.Resources = append(resp.Resources, clusterAny(c))
			}
			if err := s.Send(resp); err != nil {
				return err
			}
		}
		select {
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			if req.GetTypeUrl() == resource.ClusterType {
				names = map[string]bool{}
				for _, n := range req.GetResourceNames() {
					names[n] = true
				}
			}
		case <-changed:
		}
	}
}

// DeltaAggregatedResources serves Delta: what a CDS stream subscribes, and
// what it holds (initial_resource_versions and what was sent), decide each
// response.
func (g *GlobADS) DeltaAggregatedResources(s discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	reqs := received(s.Context(), s.Recv)
	names, held, nonce := map[string]bool{}, map[string]bool{}, 0
	var asked []string // globs subscribed since the last response
	for {
		sel, changed, ok := g.matching(names)
		resp := &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: resource.ClusterType, SystemVersionInfo: "v"}
		if ok {
			resp.RemovedResources = emptyGlobs(asked, sel)
			asked = nil
		}
		for _, c := range sel {
			if !held[c] {
				held[c] = true
				resp.Resources = append(resp.Resources, &discoverygrpc.Resource{Name: c, Version: "1", Resource: clusterAny(c)})
			}
		}
		for _, c := range slices.Sorted(maps.Keys(held)) {
			if ok && !slices.Contains(sel, c) {
				delete(held, c)
				resp.RemovedResources = append(resp.RemovedResources, c)
			}
		}
		if len(resp.Resources)+len(resp.RemovedResources) > 0 {
			nonce++
			resp.Nonce = strconv.Itoa(nonce)
			if err := s.Send(resp); err != nil {
				return err
			}
		}
		select {
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			if req.GetTypeUrl() != resource.ClusterType {
				continue
			}
			for n := range req.GetInitialResourceVersions() {
				held[n] = true
			}
			for _, n := range req.GetResourceNamesSubscribe() {
				names[n] = true
				if keying.IsGlob(n) {
					asked = append(asked, n)
				}
			}
			for _, n := range req.GetResourceNamesUnsubscribe() {
				delete(names, n)
			}
			// A server forgets what the client unsubscribed, a glob's
			// members with it (go-control-plane does).
			maps.DeleteFunc(held, func(c string, _ bool) bool { return !selects(names, c) })
		case <-changed:
		}
	}
}

// emptyGlobs returns the globs no cluster of sel is a member of: xDS TP1 has
// a server name an empty glob collection in removed_resources.
func emptyGlobs(globs, sel []string) []string {
	var out []string
	for _, n := range globs {
		gl, err := keying.ParseURL(n)
		if err == nil && !slices.ContainsFunc(sel, func(c string) bool {
			u, err := keying.ParseURN(c)
			return err == nil && gl.Matches(u)
		}) {
			out = append(out, n)
		}
	}
	return out
}
