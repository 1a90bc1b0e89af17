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
	// rejection ("" for none).
	SentVersion, AckedVersion, LastNACK string
	// Held is, for a Delta stream, each resource the client holds (as sent
	// to it) with its version; nil for SotW, whose versions are per response.
	Held map[string]string
	// Updated is when the type's state last changed on the stream: a
	// response sent, an ACK or a NACK (zero: nothing yet).
	Updated time.Time
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
			ct := ClientTypeState{Wildcard: ts.wildcard, SentVersion: ts.sentVersion, AckedVersion: ts.ackedVersion,
				LastNACK: ts.lastNACK, Updated: ts.updated}
			ct.Names = make([]string, 0, len(ts.names))
			for k := range ts.names {
				ct.Names = append(ct.Names, keying.DisplayKey(k))
			}
			slices.Sort(ct.Names)
			if ts.holds != nil {
				ct.Held = make(map[string]string, len(ts.holds))
				for k, v := range ts.holds {
					ct.Held[keying.DisplayKey(k)] = v
				}
			}
			cs.Types[t] = ct
		}
		st.mu.Unlock()
		out = append(out, cs)
	}
	return out
}
