package relay

import (
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// xDS TTL: a resource the upstream sends with a TTL is removed when the TTL
// passes without an update or a heartbeat — the control plane wants it gone
// when it can no longer be reached (a fault injection that must not outlive
// it). The relay keeps the TTL with the resource (its version covers it),
// passes TTLs and heartbeats on to the clients that support them
// (downstream), and expires its cached copy itself, which tells every
// client, with or without TTL support, that it is gone. Resources with a TTL
// are not written to the warm-restart file. TP2 variants keep no TTL.

// resourceVersion is a resource's version: derived from its bytes and, for a
// TP2 variant, its canonical constraints (a variant replaced by another with
// the same bytes is a change for its subscribers), and from its TTL (a new
// TTL is an update).
func resourceVersion(b []byte, constraints string, ttl time.Duration) string {
	if ttl > 0 {
		constraints += "\x00ttl=" + ttl.String()
	}
	return variantVersion(b, constraints)
}

// armTTL (re)starts the expiry of name after d; d 0 stops it.
func (s *state) armTTL(tc *typeCache, name string, d time.Duration) {
	if t := tc.get(name).ttl; t != nil {
		t.Stop()
		tc.entry(name).ttl = nil
		tc.tidy(name)
	}
	if d <= 0 {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() { s.expireTTL(tc, name, t) })
	tc.entry(name).ttl = t
}

// expireTTL removes name, whose TTL passed, from the cache and tells its
// watchers: the upstream's word, as if it had deleted it.
func (s *state) expireTTL(tc *typeCache, name string, t *time.Timer) {
	s.relay.lock()
	defer s.unlock()
	if s.closed || tc.get(name).ttl != t || s.scopes[tc.sc.key] != tc.sc {
		return
	}
	tc.entry(name).ttl = nil
	tc.tidy(name)
	cur, ok := tc.view.Resources[name]
	if !ok || cur.TTL == 0 {
		return
	}
	e := editOf(tc.view)
	e.drop(name)
	tc.clearUnsure(name)
	e.change(name)
	if tc.up[name] {
		e.markAbsent(name)
	}
	v := e.view(s.nextSeq())
	s.log.Info("a resource's TTL passed without an update or heartbeat: removed", zap.String("scope", tc.sc.key),
		zap.String("type", tc.typeURL), zap.String("name", keying.DisplayKey(name)), zap.Duration("ttl", cur.TTL))
	s.publish(tc, v)
	s.notify(tc, v)
}
