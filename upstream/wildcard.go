package upstream

import (
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// When is a response the wildcard's full set? SotW carries no link between a
// response and the request it answers: a server that pushed a change before
// it read the relay's request adding "*" (the request is then stale and
// ignored) sent the older, named subscription's resources. Taking that
// response for the full set would tell every wildcard client that the rest
// is gone. Delta has the same race. So a response completes the wildcard
// only when that is certain:
//
//   - the stream's first request of the type carried "*" (and it stayed):
//     every subscription the server ever applied on this stream had it;
//   - or the response carries a resource outside the named subscription:
//     the server applied "*" to it;
//   - or, when neither proves it, the server said nothing more for
//     DefaultWildcardSettle after the relay's last word (its request adding
//     "*", or its ACK of the last response, which carries "*"): a server that
//     had ignored the request answers the ACK; one that has nothing beyond
//     the named resources says nothing.
//
// Once settled, every later response on the stream is the full set too.

// DefaultWildcardSettle is how long a wildcard subscription added mid-stream
// waits for a response that proves it was applied before it counts as
// answered.
const DefaultWildcardSettle = 250 * time.Millisecond

// answersWildcard reports whether a response of st's type carrying names is
// the wildcard's full set, settling the wildcard when it proves it. Called
// with mu held.
func (c *Client) answersWildcard(st *typeState, names []string) bool {
	if !st.wildcard() {
		return false
	}
	if !st.wildSure {
		for _, n := range names {
			if !st.namedLocked(n) {
				st.wildSure = true // only the wildcard brings an unnamed resource
				break
			}
		}
	}
	if st.wildSure {
		st.settleAt = time.Time{}
		return true
	}
	c.armSettleLocked(st)
	return false
}

// namedLocked reports whether the subscription names n explicitly (TP2
// locators included).
func (st *typeState) namedLocked(n string) bool {
	if _, ok := st.names[n]; ok {
		return true
	}
	for k := range st.names {
		if name, _ := keying.SplitSubscriptionKey(k); name == n {
			return true
		}
	}
	return false
}

// armSettleLocked (re)starts the settle wait of st's wildcard and wakes the
// sender, which keeps the timer. Called with mu held.
func (c *Client) armSettleLocked(st *typeState) {
	d := c.cfg.WildcardSettle
	if d <= 0 {
		d = DefaultWildcardSettle
	}
	st.settleAt = time.Now().Add(d)
	c.notify()
}

// nextSettle returns how long until the earliest pending settle, false when
// none is pending.
func (c *Client) nextSettle() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, st := range c.types {
		if !st.settleAt.IsZero() && (first.IsZero() || st.settleAt.Before(first)) {
			first = st.settleAt
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(time.Until(first), 0), true
}

// settleDue settles the wildcards whose wait has passed and tells the
// Handler that their sets are complete. Called from the stream's sender.
func (c *Client) settleDue(server string, delta bool) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	c.mu.Lock()
	now := time.Now()
	var due []string
	for t, st := range c.types {
		if st.settleAt.IsZero() || st.settleAt.After(now) {
			continue
		}
		st.settleAt = time.Time{}
		if st.wildcard() && !st.wildSure {
			st.wildSure = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		c.log.Debug("wildcard settled: the server sent nothing more", zap.String("type", t))
		_ = c.h.OnUpdate(Update{Server: server, TypeURL: t, Complete: true, Settled: true, Delta: delta})
	}
}
