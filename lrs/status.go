package lrs

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// States of an upstream LRS stream (UpstreamStatus.State).
const (
	StateConnecting    = "connecting"    // dialing, or waiting for the upstream's first answer
	StateEstablished   = "established"   // the upstream answered: reports go there
	StateBackoff       = "backoff"       // the stream ended; waiting to try again
	StateUnimplemented = "unimplemented" // the upstream does not implement LRS; asked again later
	StateNoUpstream    = "no_upstream"   // no server configured: the load is dropped (counted)
	StateClosed        = "closed"        // the relay closed
)

// Status is what the relay's load reporting is doing, for the operator's
// views.
type Status struct {
	// ClientStreams counts the open client StreamLoadStats.
	ClientStreams int `json:"client_streams"`
	// Clusters counts the distinct clusters in the aggregates of the
	// interval in flight, over every destination.
	Clusters int `json:"clusters"`
	// Upstreams has one entry per destination, by authority then group.
	Upstreams []UpstreamStatus `json:"upstreams"`
}

// UpstreamStatus is one destination's upstream LRS stream.
type UpstreamStatus struct {
	// Authority is the xdstp authority ("": the default servers).
	Authority string `json:"authority"`
	// Group is the node group under keying.group_by ("": none).
	Group string `json:"group,omitempty"`
	// Server is the server the stream is on or tries ("" before the first
	// attempt).
	Server string `json:"server"`
	// State is one of the State* constants.
	State string `json:"state"`
	// LastError is the last error that ended a stream or an attempt.
	LastError string `json:"last_error,omitempty"`
	// Clusters counts the clusters in the interval in flight.
	Clusters int `json:"clusters"`
	// Reports counts the aggregated reports sent.
	Reports uint64 `json:"reports"`
	// LastReport is when the last report was sent (zero: none yet), and
	// LastInterval the time it covered.
	LastReport   time.Time     `json:"last_report,omitzero"`
	LastInterval time.Duration `json:"last_interval,omitempty"`
}

// fwState is a forwarder's state for Status: UpstreamStatus without the
// fields the Server fills.
type fwState struct {
	Server, State, LastError string
	Reports                  uint64
	LastReport               time.Time
	LastInterval             time.Duration
}

// setState changes the forwarder's state with fn.
func (f *forwarder) setState(fn func(*fwState)) {
	f.mu.Lock()
	fn(&f.state)
	f.mu.Unlock()
}

func (f *forwarder) stateNow() fwState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// Status returns what the load reporting is doing now. Safe for concurrent
// use.
func (s *Server) Status() Status {
	s.mu.Lock()
	st := Status{ClientStreams: len(s.streams)}
	s.mu.Unlock()
	all := map[string]bool{}
	for _, d := range s.allDests() {
		names := d.agg.Clusters()
		for _, n := range names {
			all[n] = true
		}
		fs := d.fw.stateNow()
		st.Upstreams = append(st.Upstreams, UpstreamStatus{Authority: d.key.authority, Group: d.key.group,
			Server: fs.Server, State: fs.State, LastError: fs.LastError, Clusters: len(names), Reports: fs.Reports,
			LastReport: fs.LastReport, LastInterval: fs.LastInterval})
	}
	st.Clusters = len(all)
	slices.SortFunc(st.Upstreams, func(a, b UpstreamStatus) int {
		return cmp.Or(strings.Compare(a.Authority, b.Authority), strings.Compare(a.Group, b.Group))
	})
	return st
}
