package upstream

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/keying"
)

// deltaStream is an incremental (Delta) ADS stream.
type deltaStream struct {
	c      *Client
	server string
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

	nodeSent bool // owned by the sender goroutine
}

// flush sends the pending subscription changes and ACKs. The versions the
// relay already holds are fetched from Config.InitialVersions without the
// client lock, for each type about to get its first request on this stream.
func (s *deltaStream) flush() error {
	for {
		var initial map[string]map[string]string
		if s.c.cfg.InitialVersions != nil {
			for _, t := range s.c.deltaFirstTypes() {
				if initial == nil {
					initial = make(map[string]map[string]string)
				}
				initial[t] = s.c.cfg.InitialVersions(t)
			}
		}
		reqs, firsts, again := s.c.takeDelta(initial)
		if s.c.cfg.Declared != nil {
			for t, names := range firsts {
				names, _ = canonicalized(names, self)
				s.c.cfg.Declared(t, names)
			}
		}
		for _, req := range reqs {
			if !s.nodeSent {
				req.Node = s.c.cfg.Node
				s.nodeSent = true
			}
			if ce := s.c.log.Check(zap.DebugLevel, "sending delta request"); ce != nil {
				ce.Write(zap.String("server", s.server), zap.String("type", req.GetTypeUrl()),
					zap.Strings("subscribe", req.GetResourceNamesSubscribe()),
					zap.Strings("unsubscribe", req.GetResourceNamesUnsubscribe()),
					zap.Int("initial_versions", len(req.GetInitialResourceVersions())),
					zap.String("nonce", req.GetResponseNonce()), zap.Bool("nack", req.GetErrorDetail() != nil))
			}
			if err := s.stream.Send(req); err != nil {
				return fmt.Errorf("upstream: send to %s: %w", s.server, err)
			}
		}
		if !again {
			return nil
		}
	}
}

// deltaFirstTypes returns the pending types that have not been requested on
// the current stream yet and have names to subscribe. What the relay forgot
// of them so far, the versions about to be read show: an evicted name is
// not cached, one kept unsure is, and declaring it has the new stream's
// server say whether it is gone.
func (c *Client) deltaFirstTypes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, t := range c.pending {
		if st := c.types[t]; st.sent == nil && len(st.names) > 0 {
			st.forget, st.forgetNew = nil, nil
			out = append(out, t)
		}
	}
	return out
}

// takeDelta builds the requests for every pending type: the difference
// between the desired subscription and what the server has been told, and
// one request per queued ACK/NACK (the first one combined with the
// subscription change). firsts holds, per type whose first request on the
// stream is among them, the names it declares in initial_resource_versions.
// A type whose first request needs initial versions that are not in initial,
// or that names were forgotten of since they were read (deltaFirstTypes),
// stays pending, and again is true.
func (c *Client) takeDelta(initial map[string]map[string]string) (out []*discoveryv3.DeltaDiscoveryRequest, firsts map[string][]string, again bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keep []string
	for _, t := range c.pending {
		st := c.types[t]
		first := st.sent == nil
		if first && len(st.names) == 0 && (len(st.acks) == 0 || keying.WildcardCapable(t)) {
			// Nothing to ask for. xDS: a first request subscribing nothing is
			// a legacy wildcard subscription for LDS/CDS, so an unsolicited
			// response of those types is not ACKed.
			st.dirty, st.acks = false, nil
			continue
		}
		if first {
			st.wildSure = st.wildcard() // settle.go: in the first request
			c.armSettleLocked(st)
			st.globs = firstGlobs(st)
		}
		var iv map[string]string
		if first && len(st.names) > 0 && c.cfg.InitialVersions != nil {
			v, ok := initial[t]
			if !ok || len(st.forget) > 0 {
				// Not read yet, or names forgotten since: read them again.
				keep = append(keep, t)
				continue
			}
			iv = initialVersions(st, st.spelledVersions(v))
		}
		if first {
			st.forget, st.forgetNew = nil, nil // the new stream's server holds nothing yet
			if firsts == nil {
				firsts = make(map[string][]string)
			}
			firsts[t] = slices.Collect(maps.Keys(iv))
			iv = st.declareDoubtLocked(iv)
		}
		st.dirty = false

		sub, unsub := st.unsent()
		refetch, again, confirm, told := st.confirmForgotten(sub, unsub)
		unsub = append(unsub, told...)
		if len(refetch) > 0 {
			names, locs := locators(refetch)
			out = append(out, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: names, ResourceLocatorsSubscribe: locs})
		}
		if len(refetch)+len(again) > 0 {
			names, locs := locators(slices.Concat(refetch, again))
			out = append(out, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesUnsubscribe: names, ResourceLocatorsUnsubscribe: locs})
		}
		sub = append(append(sub, again...), confirm...) // (refetch is in sub already)
		sort.Strings(sub)
		sort.Strings(unsub)
		st.sent = make(map[string]struct{}, len(st.names))
		for n := range st.names {
			st.sent[n] = struct{}{}
		}

		acks := st.acks
		st.acks = nil
		if len(sub) == 0 && len(unsub) == 0 && len(acks) == 0 {
			continue
		}
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: iv}
		req.ResourceNamesSubscribe, req.ResourceLocatorsSubscribe = locators(sub)
		req.ResourceNamesUnsubscribe, req.ResourceLocatorsUnsubscribe = locators(unsub)
		for i, a := range acks {
			if i > 0 {
				req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t}
			}
			req.ResponseNonce = a.nonce
			if a.err != nil {
				req.ErrorDetail = nackStatus(a.err)
			}
			out = append(out, req)
		}
		if len(acks) == 0 {
			out = append(out, req)
		}
		if len(confirm) > 0 {
			sort.Strings(confirm)
			st.confirmingLocked(confirm)
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t}
			req.ResourceNamesUnsubscribe, req.ResourceLocatorsUnsubscribe = locators(confirm)
			out = append(out, req)
		}
	}
	c.pending = append(c.pending[:0], keep...)
	return out, firsts, len(keep) > 0
}

// unsent returns the names to subscribe and to unsubscribe: the difference
// between the desired subscription and what the server has been told.
func (st *typeState) unsent() (sub, unsub []string) {
	for n := range st.names {
		if _, ok := st.sent[n]; !ok {
			sub = append(sub, n)
		}
	}
	for n := range st.sent {
		if _, ok := st.names[n]; !ok {
			unsub = append(unsub, n)
		}
	}
	return sub, unsub
}

// maxForgotten bounds the forgotten names kept per type: beyond it, some
// are no longer confirmed when subscribed again (see confirmForgotten).
const maxForgotten = 10000

// confirmForgotten decides what becomes of the forgotten names (Forget) as
// a request subscribes sub and unsubscribes unsub. The server may think the
// relay holds them and would not send them again. A name newly forgotten is
// unsubscribed at once (told), which makes most servers forget it; but xDS
// lets a server ignore the unsubscription of a name the client does not
// subscribe to, so whatever it kept, it is made to send them, or say they
// are gone, once they are subscribed again:
//   - refetch: subscribed again by name: subscribed, unsubscribed (a server
//     forgets what the client unsubscribes), then subscribed again;
//   - again: unsubscribed and subscribed again since the last request (the
//     server never heard of it): unsubscribed, then subscribed again;
//   - confirm: plain names the wildcard covers: subscribed with it, then
//     unsubscribed, which a server must answer with the resource or its
//     removal (xDS, "Unsubscribing from Resources").
//
// Unsubscribed now, a name is forgotten by the server. The others wait,
// each distinct name once, up to maxForgotten (beyond, the ones dropped
// rely on the server having heeded the unsubscription).
func (st *typeState) confirmForgotten(sub, unsub []string) (refetch, again, confirm, told []string) {
	if len(st.forget) == 0 {
		return nil, nil, nil, nil
	}
	for _, n := range unsub {
		delete(st.forget, n)
	}
	newWild := false
	for _, n := range sub {
		if _, f := st.forget[n]; f {
			refetch = append(refetch, n)
			delete(st.forget, n)
		}
		newWild = newWild || n == keying.Wildcard
	}
	for n := range st.forgetNew {
		if _, f := st.forget[n]; !f {
			continue
		}
		if _, named := st.names[n]; named {
			again = append(again, n) // (it is in sent: else it would be in sub)
			delete(st.forget, n)
		}
	}
	wild := st.wildcard()
	if wild {
		pick := st.forgetNew
		if newWild {
			pick = st.forget
		}
		for n := range pick {
			if _, f := st.forget[n]; f && !keying.HasParams(n) {
				confirm = append(confirm, n)
			}
		}
		for _, n := range confirm {
			delete(st.forget, n)
		}
	}
	for n := range st.forgetNew {
		if _, f := st.forget[n]; f {
			told = append(told, n)
		}
	}
	clear(st.forgetNew)
	for n := range st.forget {
		if len(st.forget) <= maxForgotten {
			break
		}
		delete(st.forget, n)
	}
	sort.Strings(refetch)
	sort.Strings(again)
	sort.Strings(confirm)
	return refetch, again, confirm, told
}

// initialVersions keeps the versions of what the first request subscribes
// to: the names, the members of its glob collections, or all of them with the
// wildcard. Only those: a Delta server
// may forget the others as soon as it answers — go-control-plane does — so
// telling it of them would not make it say when they are gone (the relay
// keeps them unsure instead, and confirms them when the wildcard comes).
func initialVersions(st *typeState, v map[string]string) map[string]string {
	if len(v) == 0 {
		return nil
	}
	if st.wildcard() {
		return v
	}
	out := make(map[string]string, len(v))
	for n, ver := range v {
		_, named := st.names[n]
		_, globbed := st.names[keying.GlobOf(n)]
		if named || globbed {
			out[n] = ver
		}
	}
	return out
}

func (s *deltaStream) recvLoop() (bool, error) {
	received := false
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			return received, fmt.Errorf("upstream: receive from %s: %w", s.server, err)
		}
		received = true
		s.c.onDeltaResponse(s.server, resp)
	}
}

// onDeltaResponse validates a Delta response, hands it to the Handler and
// queues its ACK or NACK.
func (c *Client) onDeltaResponse(server string, resp *discoveryv3.DeltaDiscoveryResponse) {
	typeURL := resp.GetTypeUrl()
	log := c.log.With(zap.String("server", server), zap.String("type", typeURL),
		zap.String("version", resp.GetSystemVersionInfo()), zap.String("nonce", resp.GetNonce()))
	if typeURL == "" {
		log.Warn("ignoring delta response without type_url")
		return
	}
	resources, verr := decodeDelta(resp)

	c.mu.Lock()
	st := c.typeLocked(typeURL)
	st.owed = time.Time{} // the first request is answered
	if len(st.names) == 0 {
		// Not subscribed: ACK and ignore. The server now thinks the relay
		// holds what it sent — an answer in flight when the wildcard was
		// dropped too, and go-control-plane keeps that across a dropped
		// wildcard — so it is forgotten explicitly: "*" subscribed again
		// would never bring it. A TP2
		// variant needs nothing: its key was unsubscribed by name, which the
		// server handles after the answer it had in flight.
		for _, r := range resp.GetResources() {
			if n := r.GetName(); n != "" {
				if st.forget == nil {
					st.forget = make(map[string]struct{})
				}
				st.forget[n] = struct{}{}
			}
		}
		st.nonce = resp.GetNonce()
		st.acks = append(st.acks, deltaAck{nonce: resp.GetNonce()})
		c.markDirtyLocked(typeURL, st)
		c.mu.Unlock()
		// What it removes, though, the relay may still hold (lingering,
		// unreferenced), and the server will not say so again: it holds
		// nothing of them now, so "*" subscribed again would keep them in
		// the wildcard set for good.
		if rm, rv := resp.GetRemovedResources(), removedVariants(resp.GetRemovedResourceNames()); len(rm) > 0 || len(rv) > 0 {
			err := c.handle(Update{Event: UnsubscribedRemoval, Server: server, TypeURL: typeURL, Removed: rm, RemovedVariants: rv, Delta: true})
			if err != nil {
				log.Warn("handler rejected the removals of a delta response for a type not subscribed", zap.Error(err))
			}
		}
		c.notify()
		log.Debug("ignoring delta response for a type not subscribed")
		return
	}
	if verr != nil {
		st.globs = nil // the server thinks the relay holds what it sent
		st.nonce = resp.GetNonce()
		st.acks = append(st.acks, deltaAck{nonce: resp.GetNonce(), err: verr})
		c.rejectedLocked(typeURL, st)
		c.markDirtyLocked(typeURL, st)
		c.mu.Unlock()
		c.notify()
		log.Warn("rejecting invalid delta response", zap.Error(verr))
		return
	}
	st.heardLocked(resources)
	st.confirmedLocked(resp)
	st.answeredDoubtLocked(resp)
	u := Update{
		Server:          server,
		TypeURL:         typeURL,
		Resources:       resources,
		Removed:         resp.GetRemovedResources(),
		RemovedVariants: removedVariants(resp.GetRemovedResourceNames()),
		Globs:           slices.Sorted(maps.Keys(st.globs)),
		Complete:        c.answered(st, resourceNames(resources)),
		Delta:           true,
		Errors:          resourceErrors(resp.GetResourceErrors()),
	}
	st.globs = nil // later responses carry changes only
	c.mu.Unlock()

	err := c.handle(u)

	c.mu.Lock()
	st.nonce = resp.GetNonce()
	if err == nil {
		st.version = resp.GetSystemVersionInfo()
		st.globsAnsweredLocked(u.Globs, resources)
	} else {
		c.rejectedLocked(typeURL, st)
	}
	st.acks = append(st.acks, deltaAck{nonce: resp.GetNonce(), err: err})
	c.markDirtyLocked(typeURL, st)
	c.mu.Unlock()
	c.notify()
	if err != nil {
		log.Warn("handler rejected delta response", zap.Error(err))
	} else {
		log.Debug("accepted delta response", zap.Int("resources", len(resources)), zap.Int("removed", len(u.Removed)))
	}
}

// globsAnsweredLocked records the glob collections an accepted response
// answered: those of the stream's first request (globs), and those a member
// in resources proves. Called with c.mu held.
func (st *typeState) globsAnsweredLocked(globs []string, resources []Resource) {
	for _, g := range globs {
		if st.globsAnswered == nil {
			st.globsAnswered = make(map[string]struct{})
		}
		st.globsAnswered[g] = struct{}{}
	}
	st.globsAnswered = proveGlobs(st, st.globsAnswered, resources)
}

// firstGlobs returns the glob collections a Delta stream's first request
// of st's type subscribes: the server's first response to it is their
// whole set — every member it has and the relay does not declare, and the
// removal of every declared one it lacks.
func firstGlobs(st *typeState) map[string]struct{} {
	var globs map[string]struct{}
	for n := range st.names {
		if keying.IsGlob(n) {
			if globs == nil {
				globs = make(map[string]struct{})
			}
			globs[n] = struct{}{}
		}
	}
	return globs
}

// removedVariants converts Delta's removed_resource_names.
func removedVariants(rns []*discoveryv3.ResourceName) []Variant {
	var out []Variant
	for _, rn := range rns {
		if rn.GetName() != "" {
			out = append(out, Variant{Name: rn.GetName(), Constraints: rn.GetDynamicParameterConstraints()})
		}
	}
	return out
}

// locators splits subscription keys into plain names and TP2 locators.
func locators(keys []string) (names []string, locs []*discoveryv3.ResourceLocator) {
	for _, k := range keys {
		name, params := keying.SplitSubscriptionKey(k)
		if params == "" {
			names = append(names, k)
			continue
		}
		p, _ := keying.ParseParams(params) // made by CanonicalParams
		locs = append(locs, &discoveryv3.ResourceLocator{Name: name, DynamicParameters: p})
	}
	return names, locs
}
