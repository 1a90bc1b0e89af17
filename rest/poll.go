package rest

import (
	"net/http"
	"sort"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// poll is one held REST-JSON request: a short-lived downstream.Watcher.
type poll struct {
	// set at creation, read-only
	s         *Server
	id        uint64
	typeURL   string
	node      *corev3.Node
	peer      string
	version   string // the request's version_info
	own       bool   // version is one of the relay's own answers to the node (memory.sent, memory.acked)
	started   time.Time
	principal *authz.Principal
	keys      []string          // subscribed keys, allowed ones after authorize
	spellings map[string]string // keys the request wrote otherwise (downstream.Change.Spellings)
	wildcard  bool
	denied    []*downstream.ResourceError // names the node may not have, by name
	wake      chan struct{}               // one slot: a View arrived or a rollout resolved
	trial     downstream.Rollout          // the pending rollout the node is a canary of (memory.trial)

	// owned by the handler goroutine
	watching bool
	mem      *memory // set before the poll is listed; its fields guarded by Server.mu

	mu sync.Mutex
	// cur is the View to answer from (guarded by mu); canary the rollout it
	// carries to this node as a canary. barrier is a rollout the node waits
	// on (not a canary): barrierView is its View, after the latest View
	// notified behind it. halted are resolved rollouts whose Views are sent
	// reverted.
	cur, barrierView, after *downstream.View
	canary, barrier         downstream.Rollout
	halted                  []downstream.Rollout
}

// subscription sets the poll's keys from the request's names: canonical,
// with the node's TP2 parameters. xDS: an LDS/CDS request without names, or
// with "*", is a wildcard subscription (every REST request is a first one).
func (p *poll) subscription(names []string) {
	params := ""
	if f := p.s.opts.NodeParameters; f != nil {
		params = keying.CanonicalParams(f(p.node))
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if n == keying.Wildcard {
			p.wildcard = true
			continue
		}
		if n == "" {
			continue
		}
		k := n
		if c, err := keying.Canonical(n); err == nil {
			k = c
		}
		if k != n && params == "" {
			if p.spellings == nil {
				p.spellings = make(map[string]string)
			}
			p.spellings[k] = n // the upstream is asked as the client asked
		}
		k = keying.NodeSubscriptionKey(k, params)
		if !seen[k] {
			seen[k] = true
			p.keys = append(p.keys, k)
		}
	}
	if len(names) == 0 {
		p.wildcard = true
	}
	p.wildcard = p.wildcard && keying.WildcardCapable(p.typeURL)
}

// authorize drops the names the node may not have (they are answered with a
// TP3 PERMISSION_DENIED error); a denied wildcard refuses the request.
func (p *poll) authorize() error {
	az := p.s.opts.Authorize
	if az == nil {
		return nil
	}
	allowed := p.keys[:0:0]
	for _, k := range p.keys {
		if err := az(p.principal, p.typeURL, k); err != nil {
			p.denied = append(p.denied, &downstream.ResourceError{Name: k, Code: codes.PermissionDenied, Message: err.Error()})
			p.s.m.RejectedRequests.WithLabelValues("permission_denied").Inc()
			continue
		}
		allowed = append(allowed, k)
	}
	p.keys = allowed
	if p.wildcard {
		if err := az(p.principal, p.typeURL, keying.Wildcard); err != nil {
			return &httpError{code: http.StatusForbidden, reason: "permission_denied",
				msg: "xds-relay: not allowed to subscribe to every " + p.typeURL + ": " + err.Error()}
		}
	}
	return nil
}

// change is the poll's subscription (on) or its end.
func (p *poll) change(on bool) downstream.Change {
	c := downstream.Change{}
	if p.wildcard {
		w := on
		c.Wildcard = &w
	}
	if on {
		c.Add, c.Spellings = p.keys, p.spellings
		for _, e := range p.denied {
			c.Answer = append(c.Answer, e.Name) // answered with their error now
		}
	} else {
		c.Remove = p.keys
	}
	return c
}

// verdict reads the request as an answer to what the node was last sent:
// REST-JSON has no nonce, so a request carrying error_detail is a NACK of
// the last answer and one whose version_info is the last answer's version
// is its ACK. A canary's verdict goes to its rollout.
func (p *poll) verdict(req *discoverypb.DiscoveryRequest) {
	s := p.s
	tl := metrics.TypeLabel(p.typeURL)
	s.mu.Lock()
	mem := p.mem
	p.own = p.version != "" && (p.version == mem.sent || p.version == mem.acked)
	var report downstream.Rollout
	var reportFor downstream.Watcher
	seq := mem.canarySeq
	nack := req.GetErrorDetail() != nil
	switch {
	case nack:
		s.m.NACKs.WithLabelValues(tl, protocolREST).Inc()
		// xDS: a NACKed version is not resent. With nothing remembered (a
		// restart, another replica) the NACK does not say which version it
		// rejected: the current one is sent, and its NACK, if it is the one,
		// remembered.
		if mem.sent != "" {
			mem.nacked = mem.sent
		}
		report, reportFor = mem.canary, mem.canaryW
	case p.version != "" && p.version == mem.sent && mem.acked != mem.sent:
		mem.acked = mem.sent
		s.m.ACKs.WithLabelValues(tl, protocolREST).Inc()
		report, reportFor = mem.canary, mem.canaryW
	}
	if report != nil {
		mem.canary, mem.canaryW = nil, nil
	}
	s.mu.Unlock()
	if nack {
		s.log.Debug("REST NACK", zap.String("node", p.node.GetId()), zap.String("type", p.typeURL),
			zap.String("reason", req.GetErrorDetail().GetMessage()))
	}
	if report != nil {
		report.Report(reportFor, nack, req.GetErrorDetail().GetMessage(), nil, seq)
	}
}

// ID implements downstream.Watcher.
func (p *poll) ID() uint64 { return p.id }

// Notify implements downstream.Watcher.
func (p *poll) Notify(v *downstream.View, _ []string) {
	p.mu.Lock()
	if p.barrier != nil {
		p.after = v
	} else {
		p.cur = v
	}
	p.mu.Unlock()
	p.signal()
}

// NotifyRollout implements downstream.Watcher. One rollout per type runs at
// a time: a barrier still held is that of a rollout that resolved before r
// started, settled first so that r is taken as it comes.
func (p *poll) NotifyRollout(v *downstream.View, r downstream.Rollout, canary bool) {
	p.mu.Lock()
	switch {
	case p.settleLocked(nil):
		p.after = v
	case canary:
		p.cur, p.canary = v, r
	case r == p.trial:
		p.cur = v // the node holds the rollout's versions already: no barrier
	default:
		p.barrier, p.barrierView = r, v
	}
	p.mu.Unlock()
	p.signal()
}

// Wake implements downstream.Watcher.
func (p *poll) Wake() { p.signal() }

func (p *poll) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// current returns the View to answer from (nil before the first) and the
// rollout it carries to this node as a canary. A pending barrier holds back
// what arrived behind it: the answer is the View before it; a released one
// lets the latest through, a halted one reverts what it rolled out.
func (p *poll) current() (*downstream.View, downstream.Rollout) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settleLocked(p) {
		return p.cur, p.canary // woken when it resolves
	}
	v := p.cur
	if v != nil {
		v, _ = downstream.Reverted(v, p.halted)
	}
	return v, p.canary
}

// settleLocked reports whether the poll's barrier is pending (w, unless
// nil, is woken when it resolves); a resolved one is dropped, and what it
// held back becomes the View to answer from. Called with mu held.
func (p *poll) settleLocked(w downstream.Watcher) bool {
	if p.barrier == nil {
		return false
	}
	pending, halted := downstream.ResolveBarrier(p.barrier, w, p.halted)
	if pending {
		return true
	}
	p.halted = halted
	p.cur = p.barrierView
	if p.after != nil {
		p.cur = p.after
	}
	p.barrier, p.barrierView, p.after = nil, nil, nil
	return false
}

// hold answers the poll as soon as there is something new for it, or 304
// when the timeout passes first.
func (p *poll) hold(w http.ResponseWriter, r *http.Request) {
	s := p.s
	timer := time.NewTimer(s.opts.PollTimeout)
	defer timer.Stop()
	for {
		if v, canary := p.current(); v != nil {
			a := p.answer(v)
			if a.known && s.fresh(p, a.version) {
				s.respond(w, p, a, canary, v.Seq)
				return
			}
		}
		select {
		case <-p.wake:
		case <-timer.C:
			// xDS REST long polling: no response unless a resource changed.
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNotModified)
			return
		case <-r.Context().Done():
			return // the client went away
		case <-s.done:
			s.refuse(w, &httpError{code: http.StatusServiceUnavailable, reason: "shutting_down", msg: "xds-relay: shutting down"})
			return
		}
	}
}

// fresh reports whether version is news for the poll: not the request's own
// and not one its node rejected.
func (s *Server) fresh(p *poll, version string) bool {
	if version == p.version {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return version != p.mem.nacked
}

// respond writes the 200 answer and remembers it for the node.
func (s *Server) respond(w http.ResponseWriter, p *poll, a answer, canary downstream.Rollout, seq uint64) {
	body, err := s.encode(p.typeURL, a)
	if err != nil {
		s.log.Warn("REST answer cannot be encoded", zap.String("type", p.typeURL), zap.Error(err))
		s.refuse(w, &httpError{code: http.StatusInternalServerError, reason: "unencodable", msg: err.Error()})
		return
	}
	s.mu.Lock()
	p.mem.sent = a.version
	if canary != nil {
		p.mem.canary, p.mem.canaryW, p.mem.canarySeq, p.mem.trial = canary, p, seq, canary
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		return
	}
	tl := metrics.TypeLabel(p.typeURL)
	s.m.Responses.WithLabelValues(tl, protocolREST).Inc()
	s.m.ResponseBytes.WithLabelValues(tl, protocolREST).Add(float64(len(body)))
}

// info is the poll's entry in /debug/clients.
func (p *poll) info() downstream.StreamInfo {
	names := make([]string, 0, len(p.keys)+len(p.denied))
	for _, k := range p.keys {
		names = append(names, keying.DisplayKey(k))
	}
	for _, e := range p.denied {
		names = append(names, keying.DisplayKey(e.Name))
	}
	sort.Strings(names)
	p.s.mu.Lock()
	sent := p.mem.sent
	p.s.mu.Unlock()
	return downstream.StreamInfo{ID: p.id, NodeID: p.node.GetId(), Cluster: p.node.GetCluster(), Peer: p.peer,
		Protocol: protocolREST, Service: p.typeURL, Types: map[string]downstream.TypeInfo{
			p.typeURL: {Wildcard: p.wildcard, Names: names, SentVersion: sent, AckedVersion: p.version},
		}}
}
