package upstream

import (
	"errors"
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// Resync: when the server has said nothing of a name, or of the wildcard's
// set, the relay asks for its word rather than infer it from the silence — on a new stream, whose first
// request the server answers for certain. The stream restarts on the same
// connection at once (no backoff), and the Handler is not told of a
// disconnection: the server is as reachable as before.

// DefaultResyncAfter is the default Config.ResyncAfter (the relay's default
// upstream.does_not_exist_after).
const DefaultResyncAfter = 15 * time.Second

// askVersion is the version a Delta stream's first request declares for a
// name the relay lacks and asks about: it matches no version of the server's,
// so the server sends the resource, or removed_resources when it does not
// exist (go-control-plane's createDeltaResponse does, as xDS says).
const askVersion = "xds-relay:ask"

// errResync ends a stream so that a new one asks the server again.
var errResync = errors.New("upstream: a new stream asks the server about names it said nothing of")

// Resync asks the server about names of typeURL it has said nothing of, on a
// new stream: SotW, every response of a full-state type answers the
// stream's first request, which names them; Delta, the first request
// declares them, and the server sends each or says it is gone. It reports
// whether a new stream will ask: not when the current stream's first request
// already did (the server's silence is all there is to learn), when a name
// was asked about once already since it was subscribed, or for SotW types
// that are not full state (a response without a name proves nothing, on any
// stream). New streams start at most once per Config.ResyncAfter: the names
// in doubt meanwhile are asked together. And not while the current stream,
// itself started to ask, awaits the answer owed to its first request (a new
// one would ask the same and wait as long), for at most owedWait:
// meanwhile Resync reports false, and the new stream asks once the server
// has answered.
func (c *Client) Resync(typeURL string, names ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.types[typeURL]
	if st == nil || c.state != StateConnected {
		return false
	}
	ask := false
	for _, n := range names {
		n = st.spelling(n)
		if gen, once := st.asked[n]; once {
			ask = ask || gen == c.streams // the new stream has not started yet
			continue
		}
		if !c.newStreamTellsLocked(typeURL, st, n) {
			continue
		}
		if st.asked == nil {
			st.asked = make(map[string]uint64)
		}
		st.asked[n] = c.streams
		if c.mode == ModeDelta {
			if st.doubt == nil {
				st.doubt = make(map[string]struct{})
			}
			st.doubt[n] = struct{}{}
		}
		ask = true
	}
	if ask {
		c.resyncLocked(ResyncDoesNotExist)
	}
	return ask && !time.Now().Before(c.owedUntilLocked())
}

// owedWait bounds how long a stream's owed answer holds new streams back,
// in units of Config.ResyncAfter: a large first answer takes several on a
// busy server, and a server stuck on the stream must still be asked anew.
const owedWait = 10

// owedUntilLocked returns until when the current stream awaits the answer
// owed to its first request of a type (typeState.owed): zero when none.
// Called with c.mu held.
func (c *Client) owedUntilLocked() time.Time {
	var until time.Time
	for _, st := range c.types {
		if u := st.owed.Add(owedWait * c.resyncEvery()); !st.owed.IsZero() && u.After(until) {
			until = u
		}
	}
	return until
}

// AnsweredSince reports whether the server may have answered name of
// typeURL since the relay asked for it on the current stream: on a SotW
// stream, a response of the type was accepted that answers, at best, a
// request naming it (sotwAsk). Its silence on the name says something
// only then: a server slow behind a large response has said nothing yet, and
// one that answered an earlier request ignores the later ones carrying the
// same nonce. (A push that crossed the request on the wire still counts:
// SotW responses do not say which request they answer.) Delta streams, and
// names not subscribed by name (a glob's members), always report true:
// Resync asks there.
func (c *Client) AnsweredSince(typeURL, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.types[typeURL]
	if c.mode == ModeDelta || st == nil {
		return true
	}
	n := st.spelling(name)
	if at, asked := st.askedAt[n]; asked {
		return st.seen >= at
	}
	_, named := st.names[n]
	return !named // subscribed, and no request has named it yet
}

// sotwAsk is a SotW request as the server hears it. xDS: a server ignores a
// request that does not carry the nonce of its latest response, and answers
// one that does only when it asks for something — other names than those it
// answered last, or anew — or when its own state changes. So a response
// answers, at best, the first request carrying the nonce of the response
// before it that asked for something, else the latest carrying it.
type sotwAsk struct {
	n     uint64   // its number on the stream (typeState.requests)
	nonce string   // the response nonce it carries
	names []string // its subscription, sorted (typeState.sortedNames)
	asks  bool     // it asks for something: other names than heard, or anew
}

// noteAskedLocked numbers a SotW request about to be built with names
// (sorted) and notes it as the one the next response answers at best
// (typeState.next), unless an earlier request with the same nonce asked for
// something; it records the names asked for that the stream's earlier
// requests did not (askedAt), and forgets those no longer subscribed. anew:
// the request carries no version, or a NACK. Called with c.mu held.
func (st *typeState) noteAskedLocked(names []string, anew bool) {
	st.requests++
	for n := range st.askedAt {
		if _, ok := st.names[n]; !ok {
			delete(st.askedAt, n)
		}
	}
	for n := range st.names {
		if _, ok := st.askedAt[n]; !ok {
			if st.askedAt == nil {
				st.askedAt = make(map[string]uint64)
			}
			st.askedAt[n] = st.requests
		}
	}
	if st.next.n != 0 && st.next.nonce == st.nonce && st.next.asks {
		return // the server answers that one, and then ignores this one
	}
	st.next = sotwAsk{n: st.requests, nonce: st.nonce, names: names, asks: anew || !slices.Equal(names, st.heard.names)}
}

// answeredLocked notes that a response of the type arrives, and returns
// the request it answers at best: 0 when none was sent since the response
// before it (a push). Called with c.mu held.
func (st *typeState) answeredLocked() uint64 {
	if st.next.n == 0 || st.next.nonce != st.nonce {
		return 0
	}
	st.heard = st.next
	return st.next.n
}

// Reasons for a new stream (Config.OnResync).
const (
	// ResyncDoesNotExist: the server said nothing of a subscribed name for
	// the relay's does-not-exist wait (Client.Resync).
	ResyncDoesNotExist = "does_not_exist"
	// ResyncWildcard: the wildcard was subscribed mid-stream and no
	// response proved its set within the settle time (settle.go).
	ResyncWildcard = "wildcard"
	// ResyncGlob: a glob collection was subscribed mid-stream on SotW and
	// no response proved its set within the settle time (settle.go).
	ResyncGlob = "glob"
	// ResyncRejected: the relay NACKed a response that left a set
	// unanswered on the stream (settle.go: rejectedLocked), and the server
	// said nothing more for the does-not-exist wait.
	ResyncRejected = "rejected"
)

// resyncLocked has a new stream start as soon as the rate limit allows.
func (c *Client) resyncLocked(reason string) {
	if c.resyncDue {
		return
	}
	c.resyncDue, c.resyncReason = true, reason
	c.notify()
}

// resyncLaterLocked has a new stream start once the does-not-exist wait
// (Config.ResyncAfter) has passed from now: the server may yet send again.
func (c *Client) resyncLaterLocked(reason string) {
	if !c.resyncDue {
		c.resyncNotBefore = time.Now().Add(c.resyncEvery())
	}
	c.resyncLocked(reason)
}

// resyncEvery is the least time between two new streams.
func (c *Client) resyncEvery() time.Duration {
	if c.cfg.ResyncAfter <= 0 {
		return DefaultResyncAfter
	}
	return c.cfg.ResyncAfter
}

// newStreamTellsLocked reports whether a new stream's first request would
// get the server's word on the subscribed name n where the current one's
// did not.
func (c *Client) newStreamTellsLocked(typeURL string, st *typeState, n string) bool {
	if keying.IsGlob(n) || n == keying.Wildcard || keying.HasParams(n) {
		// A set: what a response brings of it is its word (settle.go). A
		// TP2 key (name and parameters) cannot be declared in
		// initial_resource_versions, and SotW answers it on the stream.
		return false
	}
	_, named := st.names[n]
	covered := named || st.wildcard() || st.globNamed(n)
	if c.mode == ModeDelta {
		_, declared := st.declared[n]
		return covered && !declared
	}
	if !keying.FullState(typeURL) {
		return false
	}
	_, sure := st.sure[n]
	return covered && !sure && !st.wildSure && !st.globNamed(n)
}

// globNamed reports whether n's glob collection is subscribed.
func (st *typeState) globNamed(n string) bool {
	g := keying.GlobOf(n)
	if g == "" {
		return false
	}
	_, ok := st.names[g]
	return ok
}

// declareDoubtLocked adds to a Delta stream's first-request declarations iv
// the names in doubt it subscribes (by name, the wildcard or their glob) and
// does not declare yet, with askVersion, and records what the request
// declares.
func (st *typeState) declareDoubtLocked(iv map[string]string) map[string]string {
	for n := range st.doubt {
		_, named := st.names[n]
		if _, held := iv[n]; held || !named && !st.wildcard() && !st.globNamed(n) {
			continue
		}
		if iv == nil {
			iv = make(map[string]string)
		}
		iv[n] = askVersion
	}
	// The doubt stays until the server answers (answeredDoubtLocked): this
	// stream may end first.
	st.declared = make(map[string]struct{}, len(iv))
	for n, v := range iv {
		st.declared[n] = struct{}{}
		if v == askVersion && st.owed.IsZero() {
			st.owed = time.Now()
		}
	}
	return iv
}

// resyncWait returns how long until the due new stream may start (resync),
// and whether one is due: not before the current stream's owed answer, whose
// arrival wakes the sender, or its bound.
func (c *Client) resyncWait() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resyncDue {
		return 0, false
	}
	at := c.resynced.Add(c.resyncEvery())
	if c.resyncNotBefore.After(at) {
		at = c.resyncNotBefore
	}
	if u := c.owedUntilLocked(); u.After(at) {
		at = u
	}
	return time.Until(at), true
}

// startResync records that a new stream starts to ask the server again.
func (c *Client) startResync(server string) {
	c.mu.Lock()
	c.resyncDue, c.resyncNotBefore, c.resynced = false, time.Time{}, time.Now()
	reason := c.resyncReason
	c.mu.Unlock()
	c.log.Info("asking the upstream again on a new stream: it said nothing of what the relay waits for",
		zap.String("server", server), zap.String("reason", reason))
	if c.cfg.OnResync != nil {
		c.cfg.OnResync(reason)
	}
}

// undeclareUncoveredLocked drops from the first request's declarations the
// names the wildcard alone covered once it ends: the server forgets what it
// holds of them (go-control-plane), so only a new stream can ask.
func (st *typeState) undeclareUncoveredLocked() {
	for n := range st.declared {
		if _, named := st.names[n]; !named && !st.globNamed(n) {
			delete(st.declared, n)
		}
	}
}

// answeredDoubtLocked ends the doubt of the names a Delta response carries
// or removes: the server has answered what a first request asked.
func (st *typeState) answeredDoubtLocked(resp *discoveryv3.DeltaDiscoveryResponse) {
	for _, r := range resp.GetResources() {
		delete(st.doubt, r.GetName())
	}
	for _, n := range resp.GetRemovedResources() {
		delete(st.doubt, n)
	}
}
