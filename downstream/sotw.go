package downstream

import (
	"unique"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// runSotW reads State-of-the-World requests until the stream ends.
func (st *stream) runSotW() error {
	r := &sotwRequest{memo: &namesMemo{table: &st.srv.names}}
	for {
		r.DiscoveryRequest = new(discoverypb.DiscoveryRequest)
		if err := st.ss.RecvMsg(r); err != nil {
			return RecvErr(err)
		}
		st.readStarts()
		err := st.handleSotW(r.DiscoveryRequest)
		st.readEnds()
		if err != nil {
			return err
		}
	}
}

// handleSotW applies one request to the stream's state. A returned error is a
// gRPC status that ends the stream; everything else is answered through the
// queue.
func (st *stream) handleSotW(req *discoverypb.DiscoveryRequest) error {
	typeURL, err := st.prelude(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return err
	}
	if err := st.checkNames(req.GetResourceNames(), req.GetResourceLocators()); err != nil {
		return err
	}
	names, wrapped, keyed := st.sotwKeys(req)
	st.mu.Lock()
	ts := st.state(typeURL)
	nonce := req.GetResponseNonce()
	if st.ackInflight(nonce) {
		defer st.kick()
	}
	if ts.lastNonce != "" && nonce != ts.lastNonce {
		// xDS: a SotW request whose nonce is not the latest sent for its type is
		// stale and not answered; the client will send its current subscription
		// with the ACK/NACK of the latest response. Names it dropped meanwhile
		// may have been dropped from its cache: if it names them again, they
		// are sent again.
		ts.noteStaleDrops(typeURL, names, keyed)
		st.mu.Unlock()
		st.srv.m.StaleNonces.WithLabelValues(st.proto).Inc()
		return nil
	}
	verdict := canaryVerdict{sent: ts.sentCanary(), nack: req.GetErrorDetail()}
	if ts.lastNonce != "" {
		verdict.rollout = ts.takeVerdict(nonce, req.GetErrorDetail() != nil)
		if d := req.GetErrorDetail(); d != nil {
			// NACK: remember why; nothing is resent until the resource changes.
			// Its version_info is what the client runs: the last version it
			// accepted, whose ACK may have been stale (a newer response was
			// on its way).
			st.recordNACK(ts, typeURL, nonce, d.GetMessage())
			ts.ackedVersion = req.GetVersionInfo()
			ts.keepAccepted()
		} else {
			st.recordACK(ts, req.GetVersionInfo())
			ts.ackedView, ts.ackedKeys = ts.lastView, ts.holdsKeys
		}
	}
	if n := len(req.GetResourceNames()) + len(req.GetResourceLocators()); st.overLimit(ts, typeURL, n, n) {
		st.mu.Unlock()
		verdict.report(st)
		return nil
	}
	first := !ts.requested && ts.lastNonce == ""
	if first {
		ts.fromElsewhere = req.GetVersionInfo() != ""
		if ts.fromElsewhere {
			st.cameBack()
		}
	}
	add, remove, wildcard := ts.subscribeSotW(typeURL, names, keyed, &st.srv.sets)
	if first && ts.fromElsewhere && !keying.FullState(typeURL) {
		ts.noteBrought(add)
	}
	spellings := st.spellings(ts, add, remove, req.GetResourceNames(), req.GetResourceLocators())
	ts.wrapped = wrapped
	ts.toAnswer(add, wildcard)
	for _, n := range remove {
		delete(ts.holdsGone, n)
		delete(ts.unanswered, n)
		delete(ts.answeredWith, n)
		delete(ts.brought, n)
	}
	cm := st.commitLocked(ts, typeURL, Change{Add: add, Remove: remove, Wildcard: wildcard, Spellings: spellings})
	st.mu.Unlock()
	return st.finish(cm, verdict)
}

// subscribeSotW replaces the subscription with names and returns the change.
// xDS wildcard rules (LDS/CDS only): "*" subscribes to everything; a first
// request without names is a legacy wildcard, which lasts while requests keep
// coming without names; once a request named resources, an empty list means
// nothing.
//
// keyed says that names are subscription keys already (see sotwKeys); the
// new set is interned in sets (nil: not interned).
func (ts *typeState) subscribeSotW(typeURL string, names []string, keyed bool, sets *nameSets) (add, remove []string, wildcard *bool) {
	if ts.sameSubscription(typeURL, names) {
		return nil, nil, nil // the common ACK: nothing changed
	}
	wild := false
	want := make(map[string]struct{}, len(names))
	for _, n := range names {
		if n == keying.Wildcard {
			wild = true
			continue
		}
		if n != "" && !keyed {
			n = canonical(n)
		}
		if n != "" {
			want[n] = struct{}{}
		}
	}
	if keying.WildcardCapable(typeURL) {
		if ts.legacyWildcard && len(names) == 0 {
			wild = true
		} else {
			ts.legacyWildcard = false
		}
	} else {
		wild = false
	}
	ts.requested = true
	for n := range want {
		_, had := ts.names[n]
		_, dropped := ts.staleDropped[n]
		if !had || dropped {
			add = append(add, n)
		}
	}
	ts.staleDropped = nil
	for n := range ts.names {
		if _, ok := want[n]; !ok {
			remove = append(remove, n)
		}
	}
	ts.names = sets.intern(&ts.set, want)
	ts.hasGlobs = false
	for n := range want {
		if keying.IsGlob(n) {
			ts.hasGlobs = true
			break
		}
	}
	if wild != ts.wildcard {
		ts.wildcard = wild
		wildcard = &wild
	}
	return add, remove, wildcard
}

// sotwKeys returns the subscription of a SotW request: its names as they
// are (keyed false) on the common path — no locators, no parameters from
// the node — and otherwise the subscription keys of its names and TP2
// locators, with the keys that came as locators in wrapped.
func (st *stream) sotwKeys(req *discoverypb.DiscoveryRequest) (names []string, wrapped map[string]struct{}, keyed bool) {
	locs := req.GetResourceLocators()
	if len(locs) == 0 && st.params == "" {
		return req.GetResourceNames(), nil, false
	}
	names = make([]string, 0, len(req.GetResourceNames())+len(locs))
	for _, n := range req.GetResourceNames() {
		names = append(names, st.key(n))
	}
	for _, l := range locs {
		k := locatorKey(l)
		names = append(names, k)
		if k != keying.Wildcard {
			if wrapped == nil {
				wrapped = make(map[string]struct{})
			}
			wrapped[k] = struct{}{}
		}
	}
	return names, wrapped, true
}

// watches reports whether the stream subscribes to name, by name or through
// its glob collection.
func (ts *typeState) watches(v *View, name string) bool {
	if _, ok := ts.names[name]; ok {
		return true
	}
	if !ts.hasGlobs {
		return false
	}
	var g string
	if r, ok := v.Resources[name]; ok {
		g = r.Glob
	} else {
		g = keying.GlobOf(name)
	}
	_, ok := ts.names[g]
	return g != "" && ok
}

// sameSubscription reports, without allocating, whether names is the
// current subscription exactly (no wildcard change, nothing dropped by a
// stale request).
func (ts *typeState) sameSubscription(typeURL string, names []string) bool {
	if !ts.requested || len(ts.staleDropped) > 0 || ts.wildcard || len(names) != len(ts.names) ||
		(len(names) == 0 && keying.WildcardCapable(typeURL) && ts.legacyWildcard) {
		return false
	}
	for _, n := range names {
		if _, ok := ts.names[n]; !ok {
			return false
		}
	}
	return true
}

// canonical returns the cache's name for a requested name: xdstp URNs in
// canonical form (context parameters sorted, escaping normalised), so that
// one resource is one cache entry and one upstream subscription however
// clients spell it; anything else untouched.
func canonical(name string) string {
	if c, err := keying.Canonical(name); err == nil {
		name = c
	}
	// One copy of each name however many streams hold it (weak: collected
	// when no stream does).
	return unique.Make(name).Value()
}

// noteStaleDrops remembers the subscribed names a stale request left out.
// For LDS/CDS only the latest stale request counts: every response carries
// the whole subscription, so one the client got after naming a name again
// gave it that name (it was resent at the version the client had ACKed).
// For RDS/EDS a name dropped and named again in a later stale request is
// no longer dropped when the latest response carries it: the client gets it
// after naming it again (the request's nonce is older), and would be sent
// the same again.
func (ts *typeState) noteStaleDrops(typeURL string, names []string, keyed bool) {
	if keying.FullState(typeURL) {
		ts.staleDropped = nil
	}
	in := make(map[string]struct{}, len(names))
	for _, n := range names {
		if !keyed {
			n = canonical(n)
		}
		in[n] = struct{}{}
		if _, carried := ts.lastKeys[n]; carried {
			delete(ts.staleDropped, n)
		}
	}
	for n := range ts.names {
		if _, ok := in[n]; !ok {
			if ts.staleDropped == nil {
				ts.staleDropped = make(map[string]struct{})
			}
			ts.staleDropped[n] = struct{}{}
		}
	}
}

// noteBrought records the names a client from elsewhere subscribed first
// (RDS/EDS): it holds some version of each (see rollsBack). Called with mu
// held.
func (ts *typeState) noteBrought(add []string) {
	ts.brought = make(map[string]struct{}, len(add))
	for _, n := range add {
		ts.brought[n] = struct{}{}
	}
}

// toAnswer records what a subscription change added: a response must carry
// it even when the client has the version (see unanswered). Called with mu
// held.
func (ts *typeState) toAnswer(add []string, wildcard *bool) {
	if len(add) == 0 && (wildcard == nil || !*wildcard) {
		return
	}
	if ts.unanswered == nil {
		ts.unanswered = make(map[string]struct{})
	}
	for _, n := range add {
		ts.unanswered[n] = struct{}{}
		delete(ts.answeredWith, n)
	}
	if wildcard != nil && *wildcard {
		ts.unanswered[keying.Wildcard] = struct{}{}
	}
}
