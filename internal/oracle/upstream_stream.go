package oracle

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// pendingIndex is a queued response's nonce and snapshot index, and the
// resources it carries ("type name", toldKeys).
type pendingIndex struct {
	nonce string
	index int
	told  []string
	sent  time.Time // when queued: the relay applied it no earlier
}

// ustream is one ADS stream to the Upstream.
type ustream struct {
	u     *Upstream
	delta bool
	send  func(proto.Message) error

	mu    sync.Mutex
	node  string
	auth  string // the authority whose names the stream subscribes (noteAuthority)
	known bool   // auth is known
	types map[string]*usub
	nonce int
	out   []proto.Message
	wake  chan struct{}
	// withheld are responses queued while their type was silenced.
	withheld []queued
}

// usub is a stream's subscription of one type and what it was sent.
type usub struct {
	requested bool
	wildcard  bool
	named     bool              // SotW: a request named resources (the legacy wildcard is over)
	keys      map[string]string // subscription key → TP2 env ("" for a plain name)
	lastNonce string            // SotW: the latest nonce sent
	lastSel   string            // SotW: the selection hash last sent
	held      map[string]string // Delta: key → version the stream holds
	heldEnv   map[string]string // Delta: key → env of the variant held (TP2 removals)
	pending   []pendingIndex    // responses not acknowledged yet
}

// sender sends the stream's queued responses in order until ctx ends.
func (s *ustream) sender(ctx context.Context) {
	for {
		s.mu.Lock()
		out := s.out
		s.out = nil
		s.mu.Unlock()
		for _, m := range out {
			if s.send(m) != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
	}
}

// releaseLocked sends a response and records what it tells the relay.
// Called with s.mu held.
func (s *ustream) releaseLocked(m proto.Message, typeURL, nonce string, index int) {
	s.outLocked(m)
	if instanceOf(s.node) == "" {
		return
	}
	st := s.sub(typeURL)
	st.pending = append(st.pending, pendingIndex{nonce, index, toldKeys(m), time.Now()})
	s.u.mu.Lock()
	defer s.u.mu.Unlock()
	s.u.sentLocked(s.node, s.auth, typeURL, index)
}

// ackedLocked records that the relay acknowledged (ACK or NACK, nack) the
// response of typeURL with nonce: it applied it and the ones before; an
// ACK tells that the relay holds what the response carried. Called with
// s.mu held.
func (s *ustream) ackedLocked(typeURL, nonce string, nack bool) {
	st := s.sub(typeURL)
	for i, p := range st.pending {
		if p.nonce != nonce {
			continue
		}
		st.pending = st.pending[i+1:]
		s.u.mu.Lock()
		s.u.ackedIndexLocked(s.node, s.auth, typeURL, p.index)
		if !nack {
			s.u.toldLocked(s.node, p.told, p.sent)
		}
		s.u.mu.Unlock()
		return
	}
}

// untoldDroppedLocked forgets what the relay was told of the names in was
// that are not in now, unless the wildcard still covers them (wild): it
// unsubscribed them (Upstream.untoldLocked). Called with s.mu held.
func (s *ustream) untoldDroppedLocked(typeURL string, was, now map[string]string, wild bool) {
	if wild || instanceOf(s.node) == "" {
		return
	}
	var dropped []string
	for k := range was {
		if _, ok := now[k]; !ok {
			dropped = append(dropped, k)
		}
	}
	s.u.mu.Lock()
	defer s.u.mu.Unlock()
	s.u.untoldLocked(s.node, typeURL, dropped)
}

// noteAuthority notes, from the first name the stream subscribes, which
// authority's names it serves: the relay's stream of the default servers
// subscribes the wildcard and plain names, that of an authority its
// xdstp names. Called with s.mu held.
func (s *ustream) noteAuthority(names []string) {
	if s.known || len(names) == 0 {
		return
	}
	s.auth, _ = keying.Authority(names[0])
	s.known = true
}

func (s *ustream) sub(typeURL string) *usub {
	st := s.types[typeURL]
	if st == nil {
		st = &usub{keys: map[string]string{}, held: map[string]string{}, heldEnv: map[string]string{}}
		s.types[typeURL] = st
	}
	return st
}

// selection returns what st subscribes to in snap: key → variant; the
// wildcard lists another authority's names only when listForeign.
func selection(snap *Snapshot, typeURL string, st *usub, listForeign bool) map[string]*Res {
	out := map[string]*Res{}
	if st.wildcard {
		for _, n := range snap.Names(typeURL) {
			if r := snap.Select(typeURL, n, ""); r != nil && (listForeign || !foreign(n)) {
				out[n] = r
			}
		}
	}
	for k, env := range st.keys {
		name, _ := keying.SplitSubscriptionKey(k)
		if r := snap.Select(typeURL, name, env); r != nil {
			out[k] = r
		}
	}
	expandGlobs(snap, typeURL, st, out)
	return out
}

// wrapped returns r as a Resource wrapper: with its constraints for a TP2
// subscriber (tp2), with cache_control when it is do_not_cache.
func wrapped(r *Res, tp2 bool) *discoverypb.Resource {
	w := &discoverypb.Resource{Version: r.Hash, Resource: &anypb.Any{TypeUrl: r.Type, Value: r.Body}}
	if tp2 {
		w.ResourceName = &discoverypb.ResourceName{Name: r.Name}
		if r.Env != "" {
			w.ResourceName.DynamicParameterConstraints = keying.ValueConstraint(envParam, r.Env)
		}
	} else {
		w.Name = r.Name
	}
	if r.DoNotCache {
		w.CacheControl = &discoverypb.Resource_CacheControl{DoNotCache: true}
	}
	return w
}

// onSotW handles a SotW request: a stale nonce is ignored; a changed
// subscription or version is answered with the full selection.
func (s *ustream) onSotW(req *discoverypb.DiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == "" {
		s.node = req.GetNode().GetId()
	}
	t := req.GetTypeUrl()
	st := s.sub(t)
	s.ackedLocked(t, req.GetResponseNonce(), req.GetErrorDetail() != nil)
	s.noteAuthority(req.GetResourceNames())
	for _, l := range req.GetResourceLocators() {
		s.noteAuthority([]string{l.GetName()})
	}
	if st.lastNonce != "" && req.GetResponseNonce() != st.lastNonce {
		return // xDS: stale
	}
	keys := map[string]string{}
	wild := false
	for _, n := range req.GetResourceNames() {
		if n == keying.Wildcard {
			wild = true
			continue
		}
		keys[n] = ""
	}
	for _, l := range req.GetResourceLocators() {
		keys[locatorKey(l)] = l.GetDynamicParameters()[envParam]
	}
	// xDS: a first request without names is a legacy wildcard, which lasts
	// while requests keep coming without names.
	if len(keys) > 0 || wild {
		st.named = true
	} else if keying.WildcardCapable(t) && !st.named {
		wild = true
	}
	s.untoldDroppedLocked(t, st.keys, keys, wild)
	changed := !st.requested || wild != st.wildcard || !mapsEqual(keys, st.keys)
	st.requested, st.wildcard, st.keys = true, wild, keys
	if s.u.quietAfterNACK(req.GetErrorDetail() != nil, changed) {
		return
	}
	snap := s.u.world.Current()
	if changed || req.GetVersionInfo() != version(snap) {
		s.respondSotW(snap, t, st, true)
	}
}

func version(snap *Snapshot) string { return "i" + strconv.Itoa(snap.Index) }

func locatorKey(l *discoverypb.ResourceLocator) string {
	if len(l.GetDynamicParameters()) == 0 {
		return l.GetName()
	}
	return keying.SubscriptionKey(l.GetName(), keying.CanonicalParams(l.GetDynamicParameters()))
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// respondSotW queues the stream's full selection of typeURL, unless it is
// what was sent last and force is false. Called with s.mu held.
func (s *ustream) respondSotW(snap *Snapshot, typeURL string, st *usub, force bool) {
	sel := selection(snap, typeURL, st, s.u.listsForeign())
	keys := slices.Sorted(maps.Keys(sel))
	var h strings.Builder
	for _, k := range keys {
		h.WriteString(k + "=" + sel[k].Hash + ";")
	}
	if !force && h.String() == st.lastSel {
		return
	}
	st.lastSel = h.String()
	s.nonce++
	resp := &discoverypb.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version(snap), Nonce: strconv.Itoa(s.nonce)}
	once := map[*Res]bool{} // a variant several subscriptions select goes once
	for _, k := range keys {
		r := sel[k]
		if once[r] {
			continue
		}
		once[r] = true
		_, tp2 := st.keys[k]
		tp2 = tp2 && keying.HasParams(k)
		if tp2 || r.DoNotCache {
			a, _ := anypb.New(wrapped(r, tp2))
			resp.Resources = append(resp.Resources, a)
			continue
		}
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: typeURL, Value: r.Body})
	}
	if len(resp.Resources) > 0 && s.u.takeCorrupt(typeURL) {
		s.corruptSotW(resp, st)
		return
	}
	st.lastNonce = resp.Nonce
	s.queueLocked(resp, typeURL, resp.Nonce, snap.Index)
}

// onDelta handles a Delta request: subscription changes whatever the nonce;
// the first request's initial_resource_versions say what the relay holds.
func (s *ustream) onDelta(req *discoverypb.DeltaDiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == "" {
		s.node = req.GetNode().GetId()
	}
	t := req.GetTypeUrl()
	st := s.sub(t)
	s.ackedLocked(t, req.GetResponseNonce(), req.GetErrorDetail() != nil)
	s.noteAuthority(req.GetResourceNamesSubscribe())
	for _, l := range req.GetResourceLocatorsSubscribe() {
		s.noteAuthority([]string{l.GetName()})
	}
	first := !st.requested
	st.requested = true
	if first {
		for n, v := range req.GetInitialResourceVersions() {
			st.held[n] = v
		}
		if keying.WildcardCapable(t) && len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceLocatorsSubscribe()) == 0 {
			st.wildcard = true
		}
	}
	// A careful server answers a new wildcard or glob subscription even when
	// it selects nothing: the relay learns that the set is empty.
	answer := false
	var globs []string
	for _, n := range req.GetResourceNamesSubscribe() {
		if n == keying.Wildcard {
			st.wildcard = true
			continue
		}
		st.keys[n] = ""
		if keying.IsGlob(n) {
			answer, globs = true, append(globs, n)
		}
	}
	answer = answer || first && st.wildcard
	for _, l := range req.GetResourceLocatorsSubscribe() {
		st.keys[locatorKey(l)] = l.GetDynamicParameters()[envParam]
	}
	unsub := func(k string) {
		s.untoldDroppedLocked(t, map[string]string{k: ""}, nil, st.wildcard)
		delete(st.keys, k)
		delete(st.held, k)
		delete(st.heldEnv, k)
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if n == keying.Wildcard {
			st.wildcard = false
			continue
		}
		if _, named := st.keys[n]; named && st.wildcard {
			// xDS: a name the wildcard covers cannot be unsubscribed alone;
			// the answer says whether it still exists — the resource again,
			// or its removal (go-control-plane marks it sent with no
			// version). Forgetting it instead, no later deletion would reach
			// the relay, which had the resource confirmed by the answer to
			// its subscription.
			delete(st.keys, n)
			st.held[n] = ""
			continue
		}
		unsub(n)
	}
	for _, l := range req.GetResourceLocatorsUnsubscribe() {
		unsub(locatorKey(l))
	}
	st.dropUncovered()
	subs := len(req.GetResourceNamesSubscribe()) + len(req.GetResourceNamesUnsubscribe()) +
		len(req.GetResourceLocatorsSubscribe()) + len(req.GetResourceLocatorsUnsubscribe())
	if s.u.quietAfterNACK(req.GetErrorDetail() != nil, first || subs > 0) {
		return
	}
	s.respondDelta(s.u.world.Current(), t, st, answer, globs...)
}

// respondDelta queues what st lacks of its selection and the removals of
// what it holds that is gone; always: even when that is nothing. Each of the
// newly subscribed globs that has no member is named in removed_resources
// (xDS TP1). Called with s.mu held.
func (s *ustream) respondDelta(snap *Snapshot, typeURL string, st *usub, always bool, globs ...string) {
	if !st.requested {
		return
	}
	restore := func() {}
	if s.u.armed(typeURL) {
		held, heldEnv := maps.Clone(st.held), maps.Clone(st.heldEnv)
		restore = func() { st.held, st.heldEnv = held, heldEnv }
	}
	sel := selection(snap, typeURL, st, s.u.listsForeign())
	resp := &discoverypb.DeltaDiscoveryResponse{TypeUrl: typeURL, SystemVersionInfo: version(snap)}
	once := map[*Res]bool{} // a variant several subscriptions select goes once
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		r := sel[k]
		if st.held[k] == r.Hash {
			continue
		}
		st.held[k], st.heldEnv[k] = r.Hash, r.Env
		if !once[r] {
			once[r] = true
			resp.Resources = append(resp.Resources, wrapped(r, keying.HasParams(k)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.held)) {
		if _, ok := sel[k]; ok {
			continue
		}
		_, named := st.keys[k]
		if !named && !st.wildcard && !st.coveredByGlob(k) {
			continue
		}
		name, _ := keying.SplitSubscriptionKey(k)
		if keying.HasParams(k) {
			rn := &discoverypb.ResourceName{Name: name}
			if env := st.heldEnv[k]; env != "" {
				rn.DynamicParameterConstraints = keying.ValueConstraint(envParam, env)
			}
			resp.RemovedResourceNames = append(resp.RemovedResourceNames, rn)
		} else {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
		delete(st.held, k)
		delete(st.heldEnv, k)
	}
	resp.RemovedResources = append(resp.RemovedResources, emptyGlobs(sel, globs)...)
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && len(resp.RemovedResourceNames) == 0 && !always {
		return
	}
	if s.u.forgetful && !st.wildcard {
		// go-control-plane: what it remembers sending is, after each
		// response, what the response's subscription selects.
		for k := range st.held {
			if _, named := st.keys[k]; !named && !st.coveredByGlob(k) {
				delete(st.held, k)
				delete(st.heldEnv, k)
			}
		}
	}
	s.nonce++
	resp.Nonce = strconv.Itoa(s.nonce)
	if len(resp.Resources) > 0 && s.u.takeCorrupt(typeURL) {
		s.corruptDelta(resp, restore)
		return
	}
	s.queueLocked(resp, typeURL, resp.Nonce, snap.Index)
}

// push sends snap's typeURL to the stream where its selection changed.
func (s *ustream) push(snap *Snapshot, typeURL string, force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.types[typeURL]
	if st == nil || !st.requested {
		return
	}
	if s.delta {
		s.respondDelta(snap, typeURL, st, false)
	} else {
		s.respondSotW(snap, typeURL, st, force)
	}
}
