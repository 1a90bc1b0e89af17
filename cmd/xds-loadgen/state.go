package main

import (
	"maps"
	"slices"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// Mode is the kind of client simulated.
type Mode string

const (
	// ModeEnvoy subscribes to LDS and CDS by wildcard, then RDS and EDS by the names they reference.
	ModeEnvoy Mode = "envoy"
	// ModeGRPC follows a proxyless gRPC client: one listener by name → RDS → CDS → EDS, all by name.
	ModeGRPC Mode = "grpc"
)

// Protocol is the xDS transport variant.
type Protocol string

const (
	// ProtocolSotW is state-of-the-world xDS (StreamAggregatedResources).
	ProtocolSotW Protocol = "sotw"
	// ProtocolDelta is incremental xDS (DeltaAggregatedResources).
	ProtocolDelta Protocol = "delta"
)

// resourceState is what a client remembers about one resource.
type resourceState struct {
	hash    uint64   // of the serialized resource, to skip unchanged bytes
	version string   // Delta: the per-resource version
	d       *decoded // shared by every client that received the same bytes
}

// typeState is one client's subscription to one kind.
type typeState struct {
	wildcard  bool
	names     map[string]bool // named subscription (when not wildcard)
	requested bool            // a request for this kind was sent on the current stream
	known     map[string]resourceState
	version   string // SotW: last accepted version_info
	nonce     string // last response nonce
	received  bool   // a response with at least one resource arrived
	// refsChanged is set when a resource appeared, disappeared or changed its
	// references, so that resubscribe recomputes the next kind's names.
	refsChanged bool
}

// subChange is a subscription change of one kind to send.
type subChange struct {
	kind                   fleet.Kind
	subscribe, unsubscribe []string
}

// clientState is one simulated client's view of its subscriptions and resources:
// the pure part of a client, with no I/O. It is owned by the client's goroutine.
type clientState struct {
	mode    Mode
	ldsName string
	types   [len(fleet.Kinds)]typeState
}

func newClientState(mode Mode, ldsName string) *clientState {
	s := &clientState{mode: mode, ldsName: ldsName}
	for k := range s.types {
		s.types[k].names = map[string]bool{}
		s.types[k].known = map[string]resourceState{}
	}
	if mode == ModeEnvoy {
		// Envoy always subscribes to listeners and clusters by wildcard.
		s.types[fleet.Listeners].wildcard = true
		s.types[fleet.Clusters].wildcard = true
	} else {
		s.types[fleet.Listeners].names[ldsName] = true
	}
	return s
}

// parent returns the kind whose resources name the resources of kind k, if any.
func (s *clientState) parent(k fleet.Kind) (fleet.Kind, bool) {
	switch {
	case k == fleet.Routes:
		return fleet.Listeners, true
	case k == fleet.Endpoints:
		return fleet.Clusters, true
	case k == fleet.Clusters && s.mode == ModeGRPC:
		return fleet.Routes, true
	}
	return 0, false
}

// active reports whether kind k has a subscription to send.
func (s *clientState) active(k fleet.Kind) bool {
	t := &s.types[k]
	return t.wildcard || len(t.names) > 0
}

// initialKinds returns the kinds to request when a stream starts, in the order
// the simulated client sends them (Envoy asks for clusters before listeners).
func (s *clientState) initialKinds() []fleet.Kind {
	order := []fleet.Kind{fleet.Clusters, fleet.Endpoints, fleet.Listeners, fleet.Routes}
	if s.mode == ModeGRPC {
		order = fleet.Kinds[:]
	}
	var out []fleet.Kind
	for _, k := range order {
		if s.active(k) {
			out = append(out, k)
		}
	}
	return out
}

// streamReset forgets per-stream state (nonces, requested flags) before a reconnect.
func (s *clientState) streamReset() {
	for k := range s.types {
		s.types[k].nonce = ""
		s.types[k].requested = false
	}
}

// names returns kind k's named subscription, sorted.
func (s *clientState) names(k fleet.Kind) []string {
	return slices.Sorted(maps.Keys(s.types[k].names))
}

// lookup returns the known state of a resource.
func (s *clientState) lookup(k fleet.Kind, name string) (resourceState, bool) {
	r, ok := s.types[k].known[name]
	return r, ok
}

// remove forgets a resource of kind k (Delta removal, or absence from a
// full-state SotW response) and reports whether the client held it.
func (s *clientState) remove(k fleet.Kind, name string) bool {
	t := &s.types[k]
	if _, ok := t.known[name]; ok {
		delete(t.known, name)
		t.refsChanged = true
		return true
	}
	return false
}

// retainOnly forgets every known resource of kind k not in keep; SotW LDS/CDS
// responses carry the full state, so what is missing was deleted. It returns
// the names forgotten, sorted.
func (s *clientState) retainOnly(k fleet.Kind, keep map[string]bool) []string {
	var gone []string
	for name := range s.types[k].known {
		if !keep[name] {
			s.remove(k, name)
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	return gone
}

// resubscribe recomputes, in dependency order, the named subscriptions derived
// from known resources whose references changed, and returns the changes to
// send. Names no longer subscribed are forgotten, which may cascade to later kinds.
func (s *clientState) resubscribe() []subChange {
	var out []subChange
	defer func() {
		for k := range s.types {
			s.types[k].refsChanged = false
		}
	}()
	for _, k := range fleet.Kinds {
		p, ok := s.parent(k)
		if !ok || !s.types[p].refsChanged {
			continue
		}
		want := map[string]bool{}
		for _, r := range s.types[p].known {
			for _, n := range r.d.refs {
				want[n] = true
			}
		}
		t := &s.types[k]
		var c subChange
		for n := range want {
			if !t.names[n] {
				c.subscribe = append(c.subscribe, n)
			}
		}
		for n := range t.names {
			if !want[n] {
				c.unsubscribe = append(c.unsubscribe, n)
				s.remove(k, n)
			}
		}
		if len(c.subscribe) == 0 && len(c.unsubscribe) == 0 {
			continue
		}
		t.names = want
		c.kind = k
		slices.Sort(c.subscribe)
		slices.Sort(c.unsubscribe)
		out = append(out, c)
	}
	return out
}

// synced reports whether the client has its whole configuration: every wildcard
// kind has at least one resource and every named resource has arrived.
func (s *clientState) synced() bool {
	for k := range s.types {
		t := &s.types[k]
		if t.wildcard {
			if !t.received || len(t.known) == 0 {
				return false
			}
			continue
		}
		for n := range t.names {
			if _, ok := t.known[n]; !ok {
				return false
			}
		}
	}
	return true
}

// initialVersions returns the Delta versions of the known resources of kind k,
// for initial_resource_versions on a reconnect.
func (s *clientState) initialVersions(k fleet.Kind) map[string]string {
	t := &s.types[k]
	if len(t.known) == 0 {
		return nil
	}
	out := make(map[string]string, len(t.known))
	for n, r := range t.known {
		if r.version != "" {
			out[n] = r.version
		}
	}
	return out
}
