package downstream

import (
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// What the edge packages beside this one (rest, csds, gateway) use of the
// server: its stream ids, a read-only snapshot of its streams' state, and
// its codec's pre-encoded messages. Nothing here changes a stream.

// NewWatcherID returns a stream id that no stream of s has or will have:
// other Watchers of the same Source (REST polls) take their ids from here, so
// that the Source can key every watcher by ID.
func (s *Server) NewWatcherID() uint64 { return s.nextID.Add(1) }

// PreEncoded returns a message that the server's codec (ServerOptions)
// writes as body followed by the string field nonceField = nonce, without
// copying body: many streams can send the same body, each with its own nonce.
// body must be a serialized message that has no field nonceField.
func PreEncoded(body []byte, nonceField protowire.Number, nonce string) any {
	return newEncoded(body, int(nonceField), nonce)
}

// StreamRef identifies a stream for ClientStates.
type StreamRef struct {
	ID uint64
	// Node is the node of the stream's first request; nil until it arrived,
	// and for a stream that presented neither a node id nor a cluster.
	// Read-only.
	Node     *corev3.Node
	Peer     string
	Protocol string // "sotw" or "delta"
}

// Refs lists every stream with its node.
func (s *Server) Refs() []StreamRef {
	s.mu.Lock()
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	out := make([]StreamRef, 0, len(all))
	for _, st := range all {
		st.mu.Lock()
		ref := StreamRef{ID: st.id, Peer: st.peer, Protocol: st.proto}
		if st.nodeID != "" || st.cluster != "" {
			// bind writes node before it sets nodeID and cluster under mu, and
			// never again.
			ref.Node = st.node
		}
		st.mu.Unlock()
		out = append(out, ref)
	}
	return out
}

// ClientState is one stream's per-type protocol state, as CSDS reports it.
type ClientState struct {
	ID    uint64
	Types map[string]ClientTypeState
}

// ClientTypeState is a stream's state for one type.
type ClientTypeState struct {
	Wildcard bool
	// Names are the subscribed names (display form), sorted.
	Names []string
	// SentVersion is the version of the latest response sent, AckedVersion
	// the latest the client accepted, LastNACK the reason of its latest
	// rejection ("" for none). SotW RDS/EDS responses carry only what
	// changed, so their versions name a response, not a state: clients
	// holding the same resources may show different ones (Holds does not).
	SentVersion, AckedVersion, LastNACK string
	// Rejecting: the client rejects what it was sent last (Delta: its latest
	// verdict on the type was a NACK; SotW: the latest response was NACKed).
	Rejecting bool
	// Holds is each resource the client holds as far as the stream knows,
	// by name (display form): Delta, as sent to it; SotW, from the latest
	// response it ACKed.
	Holds map[string]HeldResource
	// Unacked (SotW) is, while the client has not ACKed the latest response
	// sent (not answered yet, or NACKed: Rejecting), each resource that
	// response carried with its version; nil otherwise and for Delta.
	Unacked map[string]string
	// Gone are the subscribed names it does not hold that the relay
	// answered as not existing (the upstream's word, or TP3 errors).
	Gone map[string]bool
	// Updated is when the type's state last changed on the stream: a
	// response sent, an ACK or a NACK (zero: nothing yet).
	Updated time.Time
}

// HeldResource is a resource a client holds: its version and the
// serialized google.protobuf.Any it received (shared, read-only; nil when
// the stream cannot read it: brought from elsewhere).
type HeldResource struct {
	Version string
	Any     []byte
}

// ClientStates returns the state of the streams with the given ids that are
// still open.
func (s *Server) ClientStates(ids []uint64) []ClientState {
	s.mu.Lock()
	sts := make([]*stream, 0, len(ids))
	for _, id := range ids {
		if st := s.streams[id]; st != nil {
			sts = append(sts, st)
		}
	}
	s.mu.Unlock()
	out := make([]ClientState, 0, len(sts))
	for _, st := range sts {
		st.mu.Lock()
		cs := ClientState{ID: st.id, Types: make(map[string]ClientTypeState, len(st.types))}
		for t, ts := range st.types {
			cs.Types[t] = ts.export(t)
		}
		st.mu.Unlock()
		out = append(out, cs)
	}
	return out
}

// export returns the type's state for CSDS. Called with mu held.
func (ts *typeState) export(typeURL string) ClientTypeState {
	ct := ClientTypeState{Wildcard: ts.wildcard, SentVersion: ts.sentVersion, AckedVersion: ts.ackedVersion,
		LastNACK: ts.lastNACK, Rejecting: ts.rejecting && (ts.holds != nil || ts.nackedSent), Updated: ts.updated}
	ct.Names = make([]string, 0, len(ts.names))
	for k := range ts.names {
		ct.Names = append(ct.Names, keying.DisplayKey(k))
	}
	slices.Sort(ct.Names)
	held := ts.clientHolds(typeURL)
	ct.Holds = displayed(held)
	if ts.holds == nil && ts.lastView != nil && ts.ackedVersion != ts.sentVersion {
		ct.Unacked = ts.unacked(typeURL)
	}
	for k := range ts.names {
		if _, ok := held[k]; !ok && ts.lastView != nil && !ts.lastView.hasKey(k) && ts.lastView.Gone(k) {
			if ct.Gone == nil {
				ct.Gone = make(map[string]bool)
			}
			ct.Gone[keying.DisplayKey(k)] = true
		}
	}
	return ct
}

// clientHolds returns what the client holds of the type by key. Called
// with mu held.
func (ts *typeState) clientHolds(typeURL string) map[string]HeldResource {
	out := make(map[string]HeldResource)
	add := func(k, version string, r *Resource) {
		h := HeldResource{Version: version}
		if r != nil {
			h.Any = r.Any
		}
		out[k] = h
	}
	switch {
	case ts.holds != nil: // Delta
		for k, ver := range ts.holds {
			r := ts.withheldRefs[k]
			if r == nil {
				r = ts.clientResource(k)
			}
			add(k, ver, r)
		}
	case ts.ackedView == nil: // SotW, nothing ACKed here
	case keying.FullState(typeURL):
		for k := range ts.ackedKeys {
			if r := ts.ackedResource(k); r != nil && ts.subscribesKey(k) {
				add(k, r.Version, r)
			}
		}
	default:
		for k := range ts.names {
			if _, fresh := ts.unanswered[k]; fresh {
				continue
			}
			if r := ts.ackedResource(k); r != nil {
				add(k, r.Version, r)
			}
		}
	}
	return out
}

// unacked returns the resources of the latest SotW response sent, which
// the client has not ACKed, by name with their versions. Called with mu
// held.
func (ts *typeState) unacked(typeURL string) map[string]string {
	keys := ts.names
	if keying.FullState(typeURL) {
		keys = ts.holdsKeys
	}
	out := make(map[string]string)
	for k := range keys {
		if r, ok := ts.lastView.resource(k); ok {
			out[keying.DisplayKey(k)] = r.Version
		}
	}
	return out
}

// displayed returns held keyed by display names.
func displayed(held map[string]HeldResource) map[string]HeldResource {
	out := make(map[string]HeldResource, len(held))
	for k, h := range held {
		out[keying.DisplayKey(k)] = h
	}
	return out
}

// ackedResource returns the resource at key of the SotW response the
// client ACKed last (nil: none). Called with mu held.
func (ts *typeState) ackedResource(key string) *Resource {
	if r, ok := ts.holdsGone[key]; ok && r != nil {
		return r
	}
	if r, ok := ts.ackedView.resource(key); ok {
		return r
	}
	return ts.withheldRefs[key]
}

// hasKey reports whether v holds a resource at key.
func (v *View) hasKey(key string) bool {
	_, ok := v.Resources[key]
	return ok
}
