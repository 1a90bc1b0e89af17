package relay

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// Bind implements downstream.Source: it puts the stream in its node group's
// scope (the shared one without keying.group_by).
func (r *Relay) Bind(w downstream.Watcher, node *corev3.Node) error {
	if sameInstance(r.node, node) {
		r.log.Warn("refused a stream from this relay itself: an upstream server of the relay reaches the relay",
			zap.String("node", node.GetId()))
		return status.Error(codes.FailedPrecondition,
			"xds-relay: this stream comes from this relay itself (its upstream servers reach it): refused")
	}
	s := r.lock()
	defer s.unlock()
	if s.closed {
		return nil
	}
	sc := s.shared
	if key := keying.GroupKey(r.groupBy, node); key != "" {
		if sc = s.scopes["group:"+key]; sc == nil {
			sc = s.newScope("group:"+key, keying.GroupNode(r.node, r.groupBy, node, key), false)
		}
	}
	sc.streams++
	if sc.idle != nil {
		sc.idle.Stop() // a client is back: the group stays
		sc.idle = nil
	}
	s.bound[w.ID()] = &binding{w: w, node: node, group: sc}
	return nil
}

// Cancel implements downstream.Source: the stream has ended. A node's own
// scope whose last stream ended is closed: nothing of it is kept.
func (r *Relay) Cancel(w downstream.Watcher) {
	s := r.lock()
	b := s.bound[w.ID()]
	delete(s.bound, w.ID())
	var clients []*upstream.Client
	if b != nil {
		if b.group.streams--; b.group.streams == 0 && b.group != s.shared {
			s.releaseLater(b.group)
		}
		if own := b.own; own != nil {
			if own.streams--; own.streams == 0 {
				clients = s.stopScope(own)
				delete(s.scopes, own.key)
			}
		}
	}
	s.unlock()
	for _, c := range clients {
		c.Close()
	}
}

// Watch implements downstream.Source. It notifies w under mu when something
// was added (or removed from a wildcard-capable type), so that the View it
// hands over is ordered with every later update.
func (r *Relay) Watch(w downstream.Watcher, typeURL string, c downstream.Change) {
	add, remove, wildcard := c.Add, c.Remove, c.Wildcard
	s := r.lock()
	defer s.unlock()
	if s.closed {
		return
	}
	sc := s.scopeOf(w, typeURL)
	if !sc.own && sc.types[typeURL].wantsOwn(c) {
		s.moveToOwn(w, typeURL) // it asks for a do_not_cache resource
		sc = s.scopeOf(w, typeURL)
	}
	tc := sc.typeCache(typeURL)
	var force []string
	hits := 0
	defer func() {
		if len(add) > 0 {
			tl := metrics.TypeLabel(typeURL)
			r.m.CacheLookups.WithLabelValues(tl, "hit").Add(float64(hits))
			r.m.CacheLookups.WithLabelValues(tl, "miss").Add(float64(len(add) - hits))
		}
	}()
	for _, name := range add {
		force = append(force, name) // (asked again: send it again)
		tc.spelling = c.Spellings[name]
		watched := s.watchKey(tc, name, w.ID())
		tc.spelling = ""
		if !watched {
			continue
		}
		if _, ok := tc.view.Resources[name]; ok {
			hits++
		}
	}
	for _, name := range remove {
		if !s.unwatchKey(tc, name, w.ID()) {
			continue
		}
		if keying.WildcardCapable(typeURL) {
			// xDS (Delta): unsubscribing a name the wildcard may cover is
			// answered with the resource or its removal.
			force = append(force, name)
		}
	}
	if wildcard != nil {
		// Its end too is answered by the stream (Delta: removals of what
		// only the wildcard covered).
		if *wildcard && s.watchKey(tc, keying.Wildcard, w.ID()) || !*wildcard && s.unwatchKey(tc, keying.Wildcard, w.ID()) {
			force = append(force, keying.Wildcard)
		}
	}
	force = append(force, c.Answer...)
	if len(force) == 0 {
		return
	}
	// Under mu, so this View is ordered with every later update.
	tell := func(d delivery) { s.tell(w, d) }
	if ro := tc.ro; ro != nil && !ro.isCanary(w) && ro.watches(w) && !ro.held[w] {
		// A new subscriber during a rollout gets the accepted versions now
		// and the rolled-out ones if the rollout is released. (A stream that
		// holds the barrier already is answered behind it, from the current
		// View: released, or reverted if the rollout halts.)
		ro.mu.Lock()
		accepted := revertView(tc.view, ro.accepted, ro.names)
		ro.mu.Unlock()
		tell(delivery{v: accepted, force: force})
		if ro.hold(w) {
			tell(delivery{v: tc.view, ro: ro})
		}
		return
	}
	tell(delivery{v: tc.view, force: force})
}

// tell notifies w of d now, or behind the deliveries to w still on their way
// (fanout.go), so that it never overtakes one.
func (s *state) tell(w downstream.Watcher, d delivery) {
	b := s.bound[w.ID()]
	if b == nil || b.pending.Load() == 0 {
		d.notify(w)
		return
	}
	d.to = []*binding{b}
	s.fan.add(d)
}

// sameInstance reports whether node comes from the relay process whose
// upstream node is self: its own upstream stream has reached it.
func sameInstance(self, node *corev3.Node) bool {
	id := self.GetMetadata().GetFields()[instanceKey].GetStringValue()
	return id != "" && node.GetMetadata().GetFields()[instanceKey].GetStringValue() == id
}
