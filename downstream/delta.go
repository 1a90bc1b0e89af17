package downstream

import (
	"slices"
	"strings"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// runDelta reads incremental requests until the stream ends.
func (st *stream) runDelta() error {
	for {
		req := new(discoverypb.DeltaDiscoveryRequest)
		if err := st.ss.RecvMsg(req); err != nil {
			return RecvErr(err)
		}
		if err := st.handleDelta(req); err != nil {
			return err
		}
	}
}

// handleDelta applies one incremental request. xDS: subscription changes are
// honoured whatever the nonce; ACK/NACK is per response nonce.
func (st *stream) handleDelta(req *discoverypb.DeltaDiscoveryRequest) error {
	n := len(req.GetResourceNamesSubscribe()) + len(req.GetResourceNamesUnsubscribe()) + len(req.GetInitialResourceVersions()) +
		len(req.GetResourceLocatorsSubscribe()) + len(req.GetResourceLocatorsUnsubscribe())
	typeURL, err := st.prelude(req.GetTypeUrl(), n, req.GetNode())
	if err != nil {
		return err
	}
	err = st.checkNames(append(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()...),
		req.GetResourceLocatorsSubscribe(), req.GetResourceLocatorsUnsubscribe())
	if err != nil {
		return err
	}
	st.mu.Lock()
	ts := st.state(typeURL)
	if st.acknowledged(req.GetResponseNonce()) {
		defer st.kick()
	}
	verdict := canaryVerdict{sent: ts.canarySent, nack: req.GetErrorDetail()}
	if nonce := req.GetResponseNonce(); nonce != "" {
		verdict.carried = ts.carried()
		verdict.rollout = ts.verdict(nonce, req.GetErrorDetail() != nil)
		if d := req.GetErrorDetail(); d != nil {
			// NACK: the versions sent stay recorded as held, so they are not
			// resent; the next change of a resource is.
			st.nacked(ts, typeURL, nonce, d.GetMessage())
		} else if nonce == ts.lastNonce {
			st.acked(ts, ts.sentVersion)
		} else {
			ts.counters.acks.Inc()
		}
	}
	add, remove, wildcard := st.subscribeDelta(ts, typeURL, req)
	cm := st.commitLocked(ts, typeURL, Change{Add: add, Remove: remove, Wildcard: wildcard})
	st.mu.Unlock()
	return st.finish(cm, verdict)
}

// subscribeDelta applies a request's subscription changes and returns them.
// xDS: "*" subscribes to the wildcard (LDS/CDS); so does a first request
// that names nothing (legacy). initial_resource_versions, on the first
// request of a type, tell what the client already holds.
func (st *stream) subscribeDelta(ts *typeState, typeURL string, req *discoverypb.DeltaDiscoveryRequest) (add, remove []string, wildcard *bool) {
	if ts.holds == nil {
		ts.holds = make(map[string]string)
		ts.names = make(map[string]struct{})
	}
	first := !ts.requested
	ts.requested = true
	if first {
		// initial_resource_versions names resources; a TP2 client's are the
		// variants its locators select, held under their keys.
		byLocator := make(map[string][]string)
		for _, l := range req.GetResourceLocatorsSubscribe() {
			c := canonical(l.GetName())
			byLocator[c] = append(byLocator[c], locatorKey(l))
		}
		for n, v := range req.GetInitialResourceVersions() {
			keys := byLocator[canonical(n)]
			if len(keys) == 0 {
				keys = []string{st.key(n)}
			}
			for _, k := range keys {
				ts.holds[k] = v
				if ts.initial == nil {
					ts.initial = make(map[string]struct{})
				}
				ts.initial[k] = struct{}{} // brought from elsewhere (transitions.go)
			}
		}
		if len(req.GetInitialResourceVersions()) > 0 {
			st.cameBack()
		}
	}
	capable := keying.WildcardCapable(typeURL)
	wild := ts.wildcard
	if first && capable && len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 &&
		len(req.GetResourceLocatorsSubscribe()) == 0 {
		wild = true
	}
	subs, unsubs := keysOf(st, req.GetResourceNamesSubscribe()), keysOf(st, req.GetResourceNamesUnsubscribe())
	for _, l := range req.GetResourceLocatorsSubscribe() {
		k := locatorKey(l)
		subs = append(subs, k)
		if k != keying.Wildcard {
			if ts.wrapped == nil {
				ts.wrapped = make(map[string]struct{})
			}
			ts.wrapped[k] = struct{}{}
		}
	}
	for _, l := range req.GetResourceLocatorsUnsubscribe() {
		unsubs = append(unsubs, locatorKey(l))
	}
	for _, n := range subs {
		switch {
		case n == keying.Wildcard:
			wild = capable
		case n == "":
		default:
			if _, ok := ts.names[n]; !ok {
				ts.names[n] = struct{}{}
				add = append(add, n)
				ts.hasGlobs = ts.hasGlobs || isGlob(n)
			}
		}
	}
	for _, n := range unsubs {
		switch {
		case n == keying.Wildcard:
			wild = false
		default:
			if _, ok := ts.names[n]; ok {
				delete(ts.names, n)
				delete(ts.wrapped, n)
				delete(ts.holdsTP2, n)
				// The client drops what it unsubscribed; if the wildcard still
				// covers it, the answer to the unsubscription resends it.
				delete(ts.holds, n)
				remove = append(remove, n)
			}
		}
	}
	if wild != ts.wildcard {
		ts.wildcard = wild
		wildcard = &wild
		if wild {
			ts.wildPending = true
		} else {
			for n := range ts.holds {
				if _, named := ts.names[n]; !named {
					delete(ts.holds, n)
					ts.unwild = append(ts.unwild, n)
				}
			}
		}
	}
	return add, remove, wildcard
}

// buildDelta turns a queued change into an incremental response: the
// resources whose version the client does not hold, and the removals.
// Called with mu held.
func (st *stream) buildDelta(it item) *encoded {
	ts := st.types[it.view.TypeURL]
	if ts == nil || ts.holds == nil {
		return nil
	}
	b := &deltaBuilder{st: st, ts: ts, it: it, v: it.view}
	return b.build()
}

// deltaBuilder builds one incremental response of a stream from a queued
// change. Used with the stream's mu held.
type deltaBuilder struct {
	st *stream
	ts *typeState
	it item
	v  *View

	send    []*Resource
	removed []string
	errs    []*ResourceError
	swapped []removal // TP2: variants replaced by another variant sent now
}

// build looks at every name the change concerns and encodes the response,
// nil when the client has nothing to learn from it.
func (b *deltaBuilder) build() *encoded {
	b.considerChange()
	b.removeUnwild()
	answerWildcard := b.answerWildcard()
	ts, v := b.ts, b.v
	w := b.st.wrapFor(ts)
	beats := heartbeats(b.it, ts, w, b.send)
	if len(b.send) == 0 && len(b.removed) == 0 && len(b.errs) == 0 && !answerWildcard && len(beats) == 0 {
		return nil
	}
	rms := b.removals()
	sortErrors(b.errs)
	body := v.delta(b.send, beats, rms, b.errs, w)
	if len(rms) > 0 || len(b.send) > 0 {
		b.st.endWithholding(ts, v.TypeURL)
	}
	return b.record(body)
}

// considerChange looks at the names the change carries, the names newly
// subscribed and the names whose removal was withheld.
func (b *deltaBuilder) considerChange() {
	it, ts := b.it, b.ts
	for n := range it.names {
		b.consider(n, false)
	}
	for n := range it.force {
		if n == keying.Wildcard {
			continue
		}
		if _, dup := it.names[n]; !dup {
			b.consider(n, true)
		}
	}
	for n := range ts.withheld {
		_, named := it.names[n]
		_, forced := it.force[n]
		if _, held := ts.holds[n]; !held {
			delete(ts.withheld, n) // settled meanwhile
		} else if !named && !forced {
			b.consider(n, false)
		}
	}
}

// sendIfNew sends r unless the client holds its version.
func (b *deltaBuilder) sendIfNew(r *Resource) {
	ts := b.ts
	k := r.key()
	delete(ts.initial, k)
	delete(ts.withheldRefs, k)
	if ts.holds[k] == r.Version {
		return
	}
	ts.holds[k] = r.Version
	b.send = append(b.send, r)
	if _, tp2 := ts.wrapped[k]; tp2 {
		if old := ts.holdsTP2[k]; old != nil && old.Constraints != r.Constraints {
			b.swapped = append(b.swapped, old.removal())
		}
		if ts.holdsTP2 == nil {
			ts.holdsTP2 = make(map[string]*Resource)
		}
		ts.holdsTP2[k] = r.Root()
	}
}

// drop tells the client n is gone.
func (b *deltaBuilder) drop(n string) {
	delete(b.ts.holds, n)
	delete(b.ts.initial, n)
	b.removed = append(b.removed, n)
}

// consider decides what the response says of n: forced when n was newly
// subscribed (or unsubscribed while the wildcard may cover it).
func (b *deltaBuilder) consider(n string, forced bool) {
	ts, v := b.ts, b.v
	if isGlob(n) {
		if forced {
			for _, r := range v.members(n) { // a new glob subscription
				b.sendIfNew(r)
			}
		}
		return
	}
	r, present := v.Resources[n]
	named := ts.watches(v, n)
	// The wildcard covers what the default servers list, never a
	// subscription with TP2 parameters.
	plainKey := !keying.HasParams(n)
	covered := plainKey && ts.wildcard && (!present || r.InWildcard())
	switch {
	case named || (covered && present):
		b.considerWatched(n, r, present, named)
	case forced && ts.wildcard && plainKey:
		// xDS: unsubscribing a name the wildcard may cover is answered
		// by the resource or by its removal.
		b.removed = append(b.removed, n)
	case covered:
		if _, held := ts.holds[n]; held && b.st.mayRemove(ts, v, n) && !b.st.withholdReferenced(ts, v, n) {
			b.drop(n)
		}
	}
}

// considerWatched decides what the response says of n, which the stream
// watches by name or which the wildcard covers and v has (r).
func (b *deltaBuilder) considerWatched(n string, r *Resource, present, named bool) {
	st, ts, v := b.st, b.ts, b.v
	if e, failed := ts.errorFor(v, n); failed && named && (!present || ts.denied[n] != nil) {
		if _, held := ts.holds[n]; held && e.NotFound() && st.withholdReferenced(ts, v, n) {
			return // make before break: the client still refers to it
		}
		// TP3: the error, and for NOT_FOUND also a removal. A transient
		// error (UNAVAILABLE) leaves the client its copy.
		b.errs = append(b.errs, e)
		if e.dataError() {
			delete(ts.holds, n)
		}
		if e.NotFound() {
			b.drop(n)
		}
	} else if present {
		b.sendIfNew(r)
	} else if _, held := ts.holds[n]; held {
		if st.mayRemove(ts, v, n) && !st.withholdReferenced(ts, v, n) {
			b.drop(n)
		}
	} else if named && v.Gone(n) {
		b.removed = append(b.removed, n) // the upstream says it does not exist
	}
}

// removeUnwild removes what only a dropped wildcard covered — unless the
// wildcard is back and still covers it: its answer resends it.
func (b *deltaBuilder) removeUnwild() {
	ts, v := b.ts, b.v
	if len(ts.unwild) == 0 || !hasKey(b.it.force, keying.Wildcard) {
		return
	}
	for _, n := range ts.unwild {
		if r, ok := v.Resources[n]; ok && ts.wildcard && r.InWildcard() {
			continue
		}
		b.removed = append(b.removed, n)
	}
	ts.unwild = nil
}

// answerWildcard sends the wildcard set to a client that subscribed to it
// (or still waits for its first answer) and removes what it no longer
// covers; it reports whether the response answers a pending wildcard.
func (b *deltaBuilder) answerWildcard() bool {
	st, ts, v := b.st, b.ts, b.v
	if !ts.wildcard || !v.Complete || (!ts.wildPending && !hasKey(b.it.force, keying.Wildcard)) {
		return false
	}
	for _, r := range v.wildcard() {
		b.sendIfNew(r)
	}
	for n := range ts.holds {
		if _, named := ts.names[n]; !named {
			if _, present := v.Resources[n]; !present && !strings.HasPrefix(n, "xdstp:") && st.mayRemove(ts, v, n) &&
				!st.withholdReferenced(ts, v, n) {
				b.drop(n)
			}
		}
	}
	answer := ts.wildPending
	ts.wildPending = false
	return answer
}

// removals sorts what the response sends and returns its removals: never a
// name both sent and removed, and for a TP2 subscriber the variant it holds.
func (b *deltaBuilder) removals() []removal {
	ts := b.ts
	slices.SortFunc(b.send, byName)
	slices.Sort(b.removed)
	b.removed = slices.Compact(b.removed)
	// Never a name both sent and removed in one response.
	b.removed = slices.DeleteFunc(b.removed, func(n string) bool {
		_, sent := slices.BinarySearchFunc(b.send, n, func(r *Resource, n string) int { return strings.Compare(r.key(), n) })
		return sent
	})
	rms := b.swapped
	for _, k := range b.removed {
		if old := ts.holdsTP2[k]; old != nil {
			rms = append(rms, old.removal()) // TP2: the variant the client holds
			delete(ts.holdsTP2, k)
			continue
		}
		n, _ := keying.SplitSubscriptionKey(k)
		rms = append(rms, removal{name: n})
	}
	return rms
}

// record notes the response body about to be sent in the type's ACK and
// canary bookkeeping and returns it with a fresh nonce.
func (b *deltaBuilder) record(body *body) *encoded {
	st, ts, it, v := b.st, b.ts, b.it, b.v
	ts.lastView = v
	nonce := st.nextNonce()
	ts.lastNonce = nonce
	ts.sentVersion = body.version
	if it.canary != nil {
		// Its verdict is about what its responses carried: a Delta client
		// NACKs the resources of a response, not what it holds.
		if ts.canary != it.canary || ts.canaryCarried == nil {
			ts.canaryCarried = make(map[string]struct{})
		}
		for _, n := range it.canary.Names() {
			if _, ok := slices.BinarySearchFunc(b.send, n, func(r *Resource, n string) int { return strings.Compare(r.key(), n) }); ok {
				ts.canaryCarried[n] = struct{}{}
			}
		}
		ts.canary, ts.canaryNonce, ts.canarySent = it.canary, nonce, it.view.Seq
		ts.canaryDoubt = ts.rejecting
	}
	ts.sentAt = time.Time{}
	if len(it.names) > 0 && !v.Received.IsZero() {
		ts.sentAt = v.Received
	}
	return newEncoded(body.bytes, deltaNonce, nonce)
}

// heartbeats returns the TTL heartbeats of it the Delta client of ts gets:
// those of resources it holds at their current version, not sent anyway.
// Called with mu held.
func heartbeats(it item, ts *typeState, w wrap, send []*Resource) []*Resource {
	if !w.ttl || len(it.beats) == 0 {
		return nil
	}
	var out []*Resource
	for n := range it.beats {
		r, ok := it.view.Resources[n]
		if !ok || r.TTL == 0 || ts.holds[n] != r.Version || slices.Contains(send, r) {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, byName)
	return out
}

func hasKey(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
}

// DeltaDiscoveryResponse and Resource field numbers (envoy.service.discovery.v3).
const (
	deltaSystemVersion = 1
	deltaResources     = 2
	deltaTypeURL       = 4
	deltaNonce         = 5
	deltaRemoved       = 6

	resourceVersion = 1
	resourceBody    = 2
	resourceName    = 3
	resourceTTL     = 6
	resourceTP2Name = 8

	deltaRemovedNames = 8
)

// removal is one name of a Delta response's removals: removed_resources, or
// for a TP2 subscriber removed_resource_names with the variant's constraints.
type removal struct {
	name        string
	tp2         bool
	constraints string
	wire        []byte
}

// removal returns the removal of the variant r for a TP2 subscriber.
func (r *Resource) removal() removal {
	return removal{name: r.Name, tp2: true, constraints: r.Constraints, wire: r.ConstraintsWire}
}

// delta returns the encoded incremental response carrying send and removed,
// memoized so that every stream sending the same change shares the bytes.
// Resources are wrapped as w says; beats are TTL heartbeats.
func (v *View) delta(send, beats []*Resource, removed []removal, errs []*ResourceError, w wrap) *body {
	var sb strings.Builder
	sb.WriteString("d\x00")
	for _, r := range send {
		w.mark(&sb, r)
		sb.WriteString(r.key())
		sb.WriteByte(0)
	}
	sb.WriteString("\x00~")
	for _, r := range beats {
		sb.WriteString(r.key() + "\x00")
	}
	sb.WriteString("\x00-")
	for _, rm := range removed {
		if rm.tp2 {
			sb.WriteString("\x01" + rm.constraints + "\x01")
		}
		sb.WriteString(rm.name)
		sb.WriteByte(0)
	}
	if len(errs) > 0 {
		sb.WriteString(errorKey(errs))
	}
	return v.memoized(sb.String(), func() *body { return encodeDelta(v.TypeURL, send, beats, removed, errs, w) })
}

func encodeDelta(typeURL string, send, beats []*Resource, removed []removal, errs []*ResourceError, w wrap) *body {
	version := setVersion(send, errs)
	var b []byte
	b = protowire.AppendTag(b, deltaSystemVersion, protowire.BytesType)
	b = protowire.AppendString(b, version)
	for _, r := range send {
		b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r.wrapper(w.formOf(r)))
	}
	for _, r := range beats {
		b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r.wrapper(formBeat|formTTL))
	}
	b = protowire.AppendTag(b, deltaTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	for _, rm := range removed {
		if rm.tp2 {
			b = protowire.AppendTag(b, deltaRemovedNames, protowire.BytesType)
			b = protowire.AppendBytes(b, encodeResourceName(rm.name, rm.wire))
			continue
		}
		b = protowire.AppendTag(b, deltaRemoved, protowire.BytesType)
		b = protowire.AppendString(b, rm.name)
	}
	b = appendErrors(b, deltaResourceErrors, errs)
	return &body{bytes: b, version: version, count: len(send)}
}

// keysOf returns the subscription keys of names.
func keysOf(st *stream, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = st.key(n)
	}
	return out
}
