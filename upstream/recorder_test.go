package upstream_test

import (
	"context"
	"sync"
	"testing"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/upstream"
)

// recorder is the Handler used by the tests: it records every update and
// state event, and tests wait for them as they wait for an Upstream's
// requests.
type recorder struct {
	mu      sync.Mutex
	updates []upstream.Update
	states  []stateEvent
	reject  func(upstream.Update) error
	n       notifier
}

type stateEvent struct {
	server    string
	connected bool
	err       error
}

func (r *recorder) OnUpdate(u upstream.Update) error {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	reject := r.reject
	r.mu.Unlock()
	r.n.broadcast()
	if reject != nil {
		return reject(u)
	}
	return nil
}

func (r *recorder) OnState(server string, connected bool, err error) {
	r.mu.Lock()
	r.states = append(r.states, stateEvent{server, connected, err})
	r.mu.Unlock()
	r.n.broadcast()
}

func (r *recorder) setReject(f func(upstream.Update) error) {
	r.mu.Lock()
	r.reject = f
	r.mu.Unlock()
}

// nextUpdate waits for the first update at or after *cur of typeURL.
func (r *recorder) nextUpdate(t *testing.T, cur *int, typeURL string) upstream.Update {
	t.Helper()
	var found upstream.Update
	eventually(t, &r.n, "update for "+typeURL, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := *cur; i < len(r.updates); i++ {
			if r.updates[i].TypeURL == typeURL {
				found, *cur = r.updates[i], i+1
				return true
			}
		}
		return false
	})
	return found
}

// numUpdates returns how many updates were recorded.
func (r *recorder) numUpdates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.updates)
}

// nextState waits for the first state event at or after *cur matching
// server and connected.
func (r *recorder) nextState(t *testing.T, cur *int, server string, connected bool) stateEvent {
	t.Helper()
	var found stateEvent
	eventually(t, &r.n, "state event", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := *cur; i < len(r.states); i++ {
			if r.states[i].server == server && r.states[i].connected == connected {
				found, *cur = r.states[i], i+1
				return true
			}
		}
		return false
	})
	return found
}

// notifier lets tests wait for "something was recorded".
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// eventually waits until check returns true, re-checking on every broadcast
// of n, for at most xdstest.WaitTimeout.
func eventually(t *testing.T, n *notifier, what string, check func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	for {
		ch := n.changed()
		if check() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
