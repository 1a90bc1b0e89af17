package upstream

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// Connection states reported by Status.
const (
	StateIdle       = "idle"       // nothing subscribed yet; no connection
	StateConnecting = "connecting" // dialling a server / opening the stream
	StateConnected  = "connected"  // a stream is open
	StateBackoff    = "backoff"    // waiting before the next attempt
)

// Client is the xDS client of one upstream authority. It keeps one ADS stream
// carrying the union of all subscriptions. Create it with New; all methods are
// safe for concurrent use.
type Client struct {
	// Set at creation, read-only.
	cfg     Config
	h       Handler
	log     *zap.Logger
	backoff func(int) time.Duration
	retry   time.Duration // PrimaryRetryInterval
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when the run goroutine has returned
	wake    chan struct{} // one slot: pending requests, or interest while idle
	once    sync.Once

	// hmu serialises Handler.OnUpdate calls: the receive loop's and the
	// sender's settlement (settle.go). Lock order: hmu → mu.
	hmu sync.Mutex

	// Guarded by mu. Never held while calling the Handler, InitialVersions or
	// sending on a stream.
	mu      sync.Mutex
	types   map[string]*typeState // by type URL; entries are never deleted
	pending []string              // type URLs with dirty set, in the order they became dirty
	server  string                // current (or last) server URI
	state   string                // one of the State* constants
	lastErr error
	mode    Mode // mode of the current (or next) stream

	// resyncDue: a new stream is to ask the server again (resync.go), for
	// resyncReason; resynced: when the last such stream started.
	resyncDue    bool
	resyncReason string // the first reason since the last new stream
	resynced     time.Time
	// resyncNotBefore: the due new stream waits until then (resyncLaterLocked).
	resyncNotBefore time.Time
	streams         uint64 // streams started

	// Owned by the run goroutine.
	sotwOnly  []bool // per server: answered Delta with Unimplemented (ModeAuto)
	connected string // server reported connected to the Handler, "" if none
}

// typeState is the subscription and protocol state of one resource type.
// Guarded by Client.mu.
type typeState struct {
	// names is the desired subscription, keying.Wildcard included.
	names map[string]struct{}
	// version is the version_info (SotW) or system_version_info (Delta) of the
	// last accepted response on the current stream.
	version string
	// nonce is the nonce of the last response handled on the current stream.
	nonce string
	// known holds, for SotW full-state types, the names present after the
	// last accepted response that are still of interest; used for Removed.
	known map[string]struct{}

	// Per stream; reset when a new stream starts.
	dirty     bool // queued in Client.pending
	requested bool // SotW: a request for the type was sent on this stream
	// sure holds, for SotW full-state types, the plain names of the type's
	// first request on this stream that are still subscribed: every
	// response on the stream answers a request that named them, so one
	// without such a name says it does not exist (as the first request's
	// "*" makes every response the wildcard's full set, settle.go).
	sure map[string]struct{}
	// keys holds, for SotW full-state types, the subscribed TP2 keys (name
	// and parameters) that every later response on this stream answers:
	// those of the first request, and those a variant of an accepted
	// response matched (the server has seen a request with them, and
	// answers requests in order). Never a key subscribed since, which a
	// response in flight may not answer yet.
	keys map[string]struct{}
	// globs holds, for SotW full-state types, the glob collections of the
	// type's first request on this stream that are still subscribed: every
	// response on the stream answers them whole. Delta: those of the type's
	// first request on this stream, until its first response (which answers
	// them).
	globs map[string]struct{}
	// globsAnswered (Delta): the glob collections a response answered on
	// this stream — the first, for those of the first request, or one that
	// brought a member only the glob covers.
	globsAnswered map[string]struct{}
	named         bool                // SotW: a request with explicit names was sent on this stream
	sent          map[string]struct{} // Delta: the subscription the server has been told; nil before the first request
	// forget (Delta): names the server may think the relay holds, to be
	// confirmed when they are subscribed again (Forget); forgetNew: those
	// forgotten since the last request was built.
	forget, forgetNew map[string]struct{}
	// reask (SotW): names forgotten (Forget) while unsubscribed, whose
	// unsubscription the server may not have heard (not sent yet, or sent
	// with a stale nonce): subscribed again, the request names what the
	// server last heard, so it asks with no version (Subscribe); reasks
	// counts those asks (onSotWResponse).
	reask  map[string]struct{}
	reasks uint64
	// confirming (Delta): forgotten names subscribed and unsubscribed under
	// the wildcard (confirmForgotten) whose answer, the resource or its
	// removal, has not come yet: the relay lacks them, the server thinks it
	// holds them, so the wildcard set is not whole before.
	confirming map[string]struct{}
	nack       error      // SotW: NACK to send with the next request
	acks       []deltaAck // Delta: ACKs/NACKs to send, in order
	// answered: the server answered the type on this stream; wildSure: it
	// certainly applies the wildcard on this stream; wildSettled: the
	// wildcard, not proven, settled by the server's silence (reported
	// once, as Update.Unfound); settleAt: when, if the
	// server says nothing more, the type or its wildcard counts as answered
	// (zero: no wait); refetch: the type was subscribed again and asked for
	// with no version, and no wildcard settles before the server answers;
	// rejected: the last response of the type was NACKed — the server
	// answered, the relay holds none of it, and the server sends again only
	// on a change, so its silence settles nothing until a valid response;
	// globSettled (SotW): a glob collection subscribed mid-stream, which no
	// response proved, had a new stream ask for its set. See settle.go.
	answered    bool
	wildSure    bool
	wildSettled bool
	globSettled bool
	settleAt    time.Time
	refetch     bool
	rejected    bool
	// doubt (Delta) holds names the relay lacks and asked the server about
	// (Resync): each new stream's first request declares them until the
	// server answers; declared holds the names the current stream's first
	// request declared. owed: when that request declared names in doubt,
	// which the server answers for certain; zero once a response of the
	// type came on this stream.
	doubt, declared map[string]struct{}
	owed            time.Time
	// requests (SotW) numbers the requests of the type on this stream, and
	// askedAt holds, for each name, the number of the first naming it; next
	// is the request the next response answers at best, heard the one the
	// server answered last, and seen the latest an accepted response
	// answered (sotwAsk, AnsweredSince).
	requests, seen uint64
	askedAt        map[string]uint64
	next, heard    sotwAsk
	// asked holds the names asked about once on a new stream (Resync) since
	// they were subscribed, with Client.streams when they were: a server
	// silent on them on that new stream is asked no more.
	asked map[string]uint64
	// dropped (LDS/CDS) holds the names unsubscribed on this stream while
	// the wildcard is not proven: a response may still answer a request that
	// named them, so one of them proves nothing about the wildcard.
	dropped map[string]struct{}
	// spelled maps a canonical xdstp name to the spelling it was subscribed
	// with, when that differs (spelling.go).
	spelled map[string]string
}

// deltaAck is one queued Delta ACK (err nil) or NACK.
type deltaAck struct {
	nonce string
	err   error
}

func (st *typeState) wildcard() bool {
	_, ok := st.names[keying.Wildcard]
	return ok
}

// sortedNames returns the subscription as sent in SotW: "*" first when
// wildcard, then the explicit names sorted.
func (st *typeState) sortedNames() []string {
	out := make([]string, 0, len(st.names))
	for n := range st.names {
		if n != keying.Wildcard {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if st.wildcard() {
		out = slices.Insert(out, 0, keying.Wildcard)
	}
	return out
}

// New returns a Client for cfg that reports to h, and starts its run
// goroutine. Nothing is dialled before the first Subscribe, unless
// cfg.Eager.
func New(cfg Config, h Handler) *Client {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Client{
		cfg:     cfg,
		h:       canonicalHandler{h},
		log:     log.With(zap.String("authority", cfg.Authority)),
		backoff: cfg.Backoff,
		retry:   cfg.PrimaryRetryInterval,
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		types:   make(map[string]*typeState),
		state:   StateIdle,
		mode:    cfg.Mode,

		sotwOnly: make([]bool, len(cfg.Servers)),
	}
	if c.backoff == nil {
		c.backoff = DefaultBackoff
	}
	if c.retry <= 0 {
		c.retry = DefaultPrimaryRetryInterval
	}
	if c.mode == ModeAuto {
		c.mode = ModeDelta
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
	return c
}

// Subscribe adds names (keying.Wildcard for a wildcard subscription) to the
// subscription for typeURL, spelled as given (spelling.go). Names already
// subscribed are ignored.
func (c *Client) Subscribe(typeURL string, names ...string) {
	c.mu.Lock()
	st := c.typeLocked(typeURL)
	if len(st.names) == 0 && st.requested && len(names) > 0 {
		// Subscribed again after it was dropped: the relay holds nothing of
		// the type, so it asks with no version. A server may have kept
		// answering meanwhile (a legacy wildcard, the empty list, cannot be
		// dropped in SotW), and those answers were ACKed and ignored: the
		// same request again would get nothing. Nor does its wildcard settle
		// before it answers: the relay holds none of those answers. (The
		// wait for the type's first answer on the stream still ends with
		// the server's silence, a full settle time from this request.)
		st.version, st.refetch = "", true
		if !st.answered {
			c.armSettleLocked(st)
		}
	}
	changed := false
	for _, n := range names {
		if _, ok := st.names[n]; !ok {
			st.spellLocked(n)
			st.names[n] = struct{}{}
			delete(st.dropped, n)
			if _, again := st.reask[n]; again {
				delete(st.reask, n)
				st.version = "" // a server answers a request it has heard before only when its version differs
				st.reasks++
			}
			changed = true
			if n == keying.Wildcard && (st.requested || st.sent != nil) || keying.IsGlob(n) && st.requested && keying.FullState(typeURL) {
				// Added mid-stream: no response proves it yet (settle.go).
				c.armSettleLocked(st)
			}
		}
	}
	if changed {
		c.markDirtyLocked(typeURL, st)
	}
	c.mu.Unlock()
	if changed {
		c.notify()
	}
}

// Unsubscribe removes names (keying.Wildcard for the wildcard subscription)
// from the subscription for typeURL. Names not subscribed are ignored.
func (c *Client) Unsubscribe(typeURL string, names ...string) {
	c.mu.Lock()
	st, ok := c.types[typeURL]
	changed := false
	if ok {
		for _, n := range names {
			n = st.spelling(n)
			if _, ok := st.names[n]; !ok {
				continue
			}
			delete(st.names, n)
			delete(st.sure, n)
			delete(st.keys, n)
			delete(st.globs, n)
			delete(st.globsAnswered, n)
			delete(st.asked, n)
			delete(st.askedAt, n) // subscribed again, it is asked anew (AnsweredSince)
			// The server forgets an unsubscribed name the first request
			// declared: its silence on it says nothing any more (Resync).
			delete(st.declared, n)
			delete(st.doubt, n)
			changed = true
			if n != keying.Wildcard && !st.wildSure && keying.WildcardCapable(typeURL) {
				if st.dropped == nil {
					st.dropped = make(map[string]struct{})
				}
				st.dropped[n] = struct{}{}
			}
			switch {
			case n == keying.Wildcard:
				st.wildSure, st.wildSettled = false, false
				if st.answered {
					st.settleAt = time.Time{}
				} // else the wait for the type's first answer goes on (settle.go)
				// Only explicitly subscribed names stay of interest.
				for k := range st.known {
					if _, ok := st.names[k]; !ok {
						delete(st.known, k)
					}
				}
				st.undeclareUncoveredLocked()
			case keying.HasParams(n) && !st.wildcard():
				st.forgetKeyName(n)
			case !st.wildcard() && keying.IsGlob(n):
				delete(st.known, n)
				for k := range st.known {
					if keying.GlobOf(k) == n {
						delete(st.known, k) // a glob collection's members
					}
				}
			case !st.wildcard():
				// (No pass over known for a plain name: the relay may
				// unsubscribe thousands in one call.)
				delete(st.known, n)
			}
		}
		if changed {
			c.markDirtyLocked(typeURL, st)
		}
	}
	c.mu.Unlock()
	if changed {
		c.notify()
	}
}

// Delta reports whether the client speaks Delta to its server (on the
// current stream, or the last one).
func (c *Client) Delta() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode == ModeDelta
}

// Forget says that the relay no longer holds names of typeURL, or no longer
// trusts what it holds of them (dropped from its cache, or unconfirmed),
// while a Delta server may think it holds them: a server remembers what it
// sent on the stream — go-control-plane even across a dropped wildcard,
// until it answers something else — and would not send them again. When
// something subscribes them again on the stream (by name, or the wildcard),
// the server is made to send them or say they are gone (takeDelta); a new
// stream's first request declares those the relay still caches (read again
// if forgotten since). Names the relay subscribes to are left alone. A SotW
// server answers a subscription that names them again with the full set,
// provided it hears of a change: see typeState.reask.
func (c *Client) Forget(typeURL string, names ...string) {
	c.mu.Lock()
	st, ok := c.types[typeURL]
	if !ok || c.mode != ModeDelta {
		if ok {
			st.reaskLocked(names)
		}
		c.mu.Unlock()
		return
	}
	changed := false
	for _, n := range names {
		n = st.spelling(n)
		if _, sub := st.names[n]; !sub {
			if st.forget == nil {
				st.forget = make(map[string]struct{})
			}
			if st.forgetNew == nil {
				st.forgetNew = make(map[string]struct{}) // (an ignored answer's names fill forget alone)
			}
			st.forget[n], st.forgetNew[n] = struct{}{}, struct{}{}
			changed = true
		}
	}
	if changed {
		c.markDirtyLocked(typeURL, st)
	}
	c.mu.Unlock()
	if changed {
		c.notify()
	}
}

// reaskLocked notes the forgotten names that a SotW request is to ask for
// again with no version should they be subscribed again on this stream
// (reask), up to maxForgotten. Called with c.mu held.
func (st *typeState) reaskLocked(names []string) {
	if !st.requested {
		return // the stream's first request asks with no version anyway
	}
	for _, n := range names {
		n = st.spelling(n)
		if _, sub := st.names[n]; sub || len(st.reask) >= maxForgotten {
			continue
		}
		if st.reask == nil {
			st.reask = make(map[string]struct{})
		}
		st.reask[n] = struct{}{}
	}
}

// Close stops the client: it cancels the stream, closes the connection and
// waits for every goroutine of the client. It must not be called from a
// Handler method. Calling it again is a no-op.
func (c *Client) Close() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
}

// ConnectedServer returns the server the client has a stream open to, "" when
// it has none.
func (c *Client) ConnectedServer() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != StateConnected {
		return ""
	}
	return c.server
}

// State returns the connection state (one of the State* constants) and the
// server it concerns: the current one, or the last one tried ("" while
// idle). Cheaper than Status: for metrics.
func (c *Client) State() (state, server string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.server
}

// OnFallback reports whether the client is connected to, or trying, a
// server that is not the first of its list (gRFC A71 fallback). Idle and in
// backoff it is not: the next attempt goes to the first server.
func (c *Client) OnFallback() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case StateIdle, StateBackoff:
		return false
	}
	return len(c.cfg.Servers) > 0 && c.server != "" && c.server != c.cfg.Servers[0].URI
}

// Status is a snapshot of a Client's state, for debug pages and tests.
type Status struct {
	Authority string       `json:"authority"`
	Server    string       `json:"server"` // current server, or the last one tried
	State     string       `json:"state"`  // one of the State* constants
	LastError string       `json:"last_error,omitempty"`
	Mode      Mode         `json:"mode"` // ModeSotW or ModeDelta: the protocol in use or tried next
	Types     []TypeStatus `json:"types"`
}

// TypeStatus is the state of one resource type in a Status.
type TypeStatus struct {
	TypeURL  string   `json:"type_url"`
	Wildcard bool     `json:"wildcard"`
	Names    []string `json:"names"` // explicit names, sorted; "*" is reported by Wildcard
	Version  string   `json:"version"`
	Nonce    string   `json:"nonce"`
}

// Status returns a snapshot of the client's state. Types are sorted by type
// URL.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{
		Authority: c.cfg.Authority,
		Server:    c.server,
		State:     c.state,
		Mode:      c.mode,
		Types:     make([]TypeStatus, 0, len(c.types)),
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	for t, st := range c.types {
		names := st.sortedNames()
		if st.wildcard() {
			names = names[1:]
		}
		s.Types = append(s.Types, TypeStatus{
			TypeURL:  t,
			Wildcard: st.wildcard(),
			Names:    names,
			Version:  st.version,
			Nonce:    st.nonce,
		})
	}
	sort.Slice(s.Types, func(i, j int) bool { return s.Types[i].TypeURL < s.Types[j].TypeURL })
	return s
}

// notify wakes the sender (or the idle run goroutine).
func (c *Client) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) typeLocked(typeURL string) *typeState {
	st, ok := c.types[typeURL]
	if !ok {
		st = &typeState{names: make(map[string]struct{})}
		c.types[typeURL] = st
	}
	return st
}

func (c *Client) markDirtyLocked(typeURL string, st *typeState) {
	if !st.dirty {
		st.dirty = true
		c.pending = append(c.pending, typeURL)
	}
}

// hasInterestLocked reports whether anything is subscribed.
func (c *Client) hasInterestLocked() bool {
	for _, st := range c.types {
		if len(st.names) > 0 {
			return true
		}
	}
	return false
}

// resetForStreamLocked clears the per-stream state when a new stream starts
// and queues a request for every subscribed type, in make-before-break order
// (clusters, endpoints, listeners, routes, then the rest).
//
// SotW: the first request of each type carries an empty version and nonce,
// so the server sends the full current state.
func (c *Client) resetForStreamLocked() {
	c.pending = c.pending[:0]
	c.resyncDue, c.resyncNotBefore = false, time.Time{} // this stream asks everything again
	c.streams++
	for _, st := range c.types {
		st.version, st.nonce = "", ""
		st.dirty, st.requested, st.named, st.sent, st.nack, st.acks, st.forget, st.forgetNew = false, false, false, nil, nil, nil, nil, nil
		st.confirming, st.reask = nil, nil
		st.sure, st.keys, st.globs, st.globsAnswered, st.dropped, st.declared = nil, nil, nil, nil, nil, nil
		st.answered, st.wildSure, st.wildSettled, st.settleAt, st.refetch, st.rejected = false, false, false, time.Time{}, false, false
		st.globSettled, st.owed, st.requests, st.seen, st.askedAt, st.next, st.heard = false, time.Time{}, 0, 0, nil, sotwAsk{}, sotwAsk{}
	}
	order := make([]string, 0, len(c.types))
	for t, st := range c.types {
		if len(st.names) > 0 {
			order = append(order, t)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		ri, rj := keying.OrderRank(order[i]), keying.OrderRank(order[j])
		if ri != rj {
			return ri < rj
		}
		return order[i] < order[j]
	})
	for _, t := range order {
		c.markDirtyLocked(t, c.types[t])
	}
}

// setState records the connection state for Status.
func (c *Client) setState(server, state string, err error) {
	c.mu.Lock()
	c.server, c.state = server, state
	if err != nil {
		c.lastErr = err
	}
	c.mu.Unlock()
}

// errSwitch reports that the stream was closed to return to an earlier server.
var errSwitch = errors.New("upstream: an earlier server is reachable again")
