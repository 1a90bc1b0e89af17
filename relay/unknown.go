package relay

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/downstream"
)

// unknownWait is the wait of the names armed under one hold of the lock (a
// client subscribing thousands in one request) with the same duration: one
// timer, and one View for what their silence answers when it fires.
type unknownWait struct {
	timer *time.Timer
	hold  uint64 // state.holds when they were armed
	d     time.Duration
	names []string
}

// unknownFired ends the wait w for its names that still wait on it.
func (s *state) unknownFired(tc *typeCache, w *unknownWait) {
	s.relay.lock()
	defer s.unlock()
	if s.closed || s.scopes[tc.sc.key] != tc.sc {
		return
	}
	if tc.arming == w {
		tc.arming = nil
	}
	var quiet, unreachable []string
	for _, name := range w.names {
		if tc.get(name).wait != w {
			continue // confirmed, subscribed again or re-armed meanwhile (or listed twice)
		}
		tc.entry(name).wait = nil
		tc.tidy(name)
		if tc.knows(name) || !tc.covers(name) {
			continue
		}
		// The subscriptions that cover it may have changed meanwhile.
		auth := tc.speaker(name)
		_, cached := tc.view.Resources[name] // unsure (see wordUnsure)
		switch {
		case !tc.sc.connected[auth] && cached:
			// Served as cached meanwhile (fail static).
		case !tc.sc.connected[auth]:
			unreachable = append(unreachable, name)
		case !tc.unconfirmed[auth] && s.askUpstream(tc, name):
			// A new stream asks for the upstream's word: wait for it.
		case !tc.unconfirmed[auth] && cached && !s.answeredSince(tc, name):
			// The server has not answered the type since the relay asked
			// for name (slow, behind a large response): its silence does
			// not take the cached copy yet (silent).
		case !tc.unconfirmed[auth]:
			quiet = append(quiet, name)
			continue
		}
		s.armUnknown(tc, name) // not answered yet: look again later
	}
	s.unreachable(tc, unreachable)
	s.silent(tc, quiet)
}

// unreachable: no upstream server of the names' authority is reachable, and
// the relay holds nothing of them: clients get the relay's own TP3
// UNAVAILABLE (transient: they keep what they have). One View for them all.
func (s *state) unreachable(tc *typeCache, names []string) {
	e := editOf(tc.view)
	for _, name := range names {
		if _, failed := tc.view.Errors[name]; failed {
			continue
		}
		auth := tc.speaker(name)
		e.setError(name, &downstream.ResourceError{Name: name, Code: codes.Unavailable,
			Message: fmt.Sprintf("xds-relay: no upstream server of authority %q is reachable", auth)})
		e.change(name)
		tc.markUnreachable(name)
	}
	if len(e.changed) == 0 {
		return
	}
	v := e.view(s.nextSeq())
	s.publish(tc, v)
	s.notify(tc, v)
}
