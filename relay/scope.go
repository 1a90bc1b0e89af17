package relay

import (
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// A scope is one cache with its own upstream streams (one per authority):
//   - the shared scope, which every stream uses by default;
//   - a node group's (keying.group_by), whose upstream node carries the
//     group's projected fields;
//   - one client node's own ("node:ID"): its secrets — xDS secrets are never
//     shared across node ids — and the types it subscribes to that hold a
//     do_not_cache resource (see nocache.go); the upstream sees that client's
//     own node. It is closed when the last stream of its node ends.
//
// Guarded by Relay.mu.
type scope struct {
	key       string // "" for the shared scope
	node      *corev3.Node
	types     map[string]*typeCache
	upstreams map[string]*upstream.Client // by authority
	// connected holds the authorities with a live upstream stream.
	connected map[string]bool
	// streams counts the streams bound to the scope.
	streams int
	// own marks a node's own scope.
	own bool
	// idle closes a node group's scope that has no stream left (see
	// releaseLater); nil while streams are bound.
	idle *time.Timer
}

// binding is what the relay knows of a stream: its node and its scopes.
type binding struct {
	w     downstream.Watcher
	node  *corev3.Node
	group *scope // LDS, CDS, ... (the shared scope without group_by)
	own   *scope // the node's own scope, created at first use
	// ownTypes are the types (besides secrets) this stream gets from its
	// node's own scope: it subscribed to a do_not_cache resource of them.
	ownTypes map[string]bool
	// pending counts the deliveries to w under way (fanout.go).
	pending atomic.Int32
}

func (sc *scope) typeCache(typeURL string) *typeCache {
	tc := sc.types[typeURL]
	if tc == nil {
		tc = &typeCache{
			sc:       sc,
			typeURL:  typeURL,
			view:     &downstream.View{TypeURL: typeURL, Resources: map[string]*downstream.Resource{}},
			watchers: make(map[string]*watcherSet),
			wild:     &watcherSet{},
			up:       make(map[string]bool),
			linger:   make(map[string]*lingerEntry),
			names:    make(map[string]*entry),
		}
		sc.types[typeURL] = tc
	}
	return tc
}

// newScope creates a scope presenting node upstream, with a client per
// configured authority (clients dial lazily).
func (s *state) newScope(key string, node *corev3.Node, own bool) *scope {
	sc := &scope{key: key, node: node, types: make(map[string]*typeCache),
		upstreams: make(map[string]*upstream.Client), connected: make(map[string]bool), own: own}
	sc.upstreams[""] = s.relay.newClient(sc, "", s.cfg.Upstream.XDSServers)
	for auth, a := range s.cfg.Upstream.Authorities {
		servers := a.XDSServers
		if len(servers) == 0 {
			servers = s.cfg.Upstream.XDSServers
		}
		sc.upstreams[auth] = s.relay.newClient(sc, auth, servers)
	}
	s.scopes[key] = sc
	return sc
}

// scopeOf returns the scope that serves typeURL to w.
func (s *state) scopeOf(w downstream.Watcher, typeURL string) *scope {
	b := s.bound[w.ID()]
	if b == nil {
		return s.shared
	}
	if typeURL != keying.SecretType && !b.ownTypes[typeURL] {
		return b.group
	}
	return s.ownScope(b)
}

// ownScope returns the stream's node's own scope, creating it.
func (s *state) ownScope(b *binding) *scope {
	if b.own == nil {
		key := "node:" + b.node.GetId()
		sc := s.scopes[key]
		if sc == nil {
			sc = s.newScope(key, proto.Clone(b.node).(*corev3.Node), true)
		}
		sc.streams++
		b.own = sc
	}
	return b.own
}

// nodeParameters returns the keying.dynamic_parameters_from_node
// translation of a node into TP2 dynamic parameters, nil when none is
// configured. A field the node lacks is left out.
func nodeParameters(k *config.Keying) func(*corev3.Node) map[string]string {
	if k == nil || len(k.DynamicParametersFromNode) == 0 {
		return nil
	}
	from := k.DynamicParametersFromNode
	return func(node *corev3.Node) map[string]string {
		out := make(map[string]string, len(from))
		for param, field := range from {
			if v, ok := keying.LookupNodeField(node, field); ok {
				out[param] = v
			}
		}
		return out
	}
}

// releaseLater closes a node group's scope, and its upstream streams, a
// linger after its last stream ended, unless a stream of the group binds
// again meanwhile. Its cache goes with it.
func (s *state) releaseLater(sc *scope) {
	var t *time.Timer
	t = time.AfterFunc(s.linger, func() {
		s.relay.lock()
		if s.closed || sc.idle != t || sc.streams > 0 || s.scopes[sc.key] != sc {
			s.unlock()
			return
		}
		clients := s.stopScope(sc)
		delete(s.scopes, sc.key)
		s.unlock()
		s.log.Debug("node group released", zap.String("scope", sc.key))
		for _, c := range clients {
			c.Close()
		}
	})
	sc.idle = t
}

// stopScope stops a scope's timers and returns its upstream clients for the
// caller to close after unlocking.
func (s *state) stopScope(sc *scope) []*upstream.Client {
	if sc.idle != nil {
		sc.idle.Stop()
	}
	for _, tc := range sc.types {
		for _, l := range tc.linger {
			l.timer.Stop()
		}
		if tc.ro != nil {
			tc.ro.timer.Stop()
		}
		tc.stopTimers()
	}
	clients := make([]*upstream.Client, 0, len(sc.upstreams))
	for _, c := range sc.upstreams {
		clients = append(clients, c)
	}
	return clients
}
