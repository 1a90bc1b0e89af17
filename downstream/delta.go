package downstream

import (
	"strings"

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
		st.readStarts()
		err := st.handleDelta(req)
		st.readEnds()
		if err != nil {
			return err
		}
	}
}

// handleDelta applies one incremental request. xDS: subscription changes are
// honoured whatever the nonce; ACK/NACK is per response nonce.
func (st *stream) handleDelta(req *discoverypb.DeltaDiscoveryRequest) error {
	typeURL, err := st.prelude(req.GetTypeUrl(), req.GetNode())
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
	if st.ackInflight(req.GetResponseNonce()) {
		defer st.kick()
	}
	verdict := canaryVerdict{sent: ts.sentCanary(), nack: req.GetErrorDetail()}
	if nonce := req.GetResponseNonce(); nonce != "" {
		verdict.carried = ts.carried()
		verdict.rollout = ts.takeVerdict(nonce, req.GetErrorDetail() != nil)
		if d := req.GetErrorDetail(); d != nil {
			// NACK: the versions sent stay recorded as held, so they are not
			// resent; the next change of a resource is.
			st.recordNACK(ts, typeURL, nonce, d.GetMessage())
		} else if nonce == ts.lastNonce {
			st.recordACK(ts, ts.sentVersion)
		} else {
			ts.counters.acks.Inc()
		}
	}
	subs := len(req.GetResourceNamesSubscribe()) + len(req.GetResourceLocatorsSubscribe())
	n := subs + len(req.GetResourceNamesUnsubscribe()) + len(req.GetResourceLocatorsUnsubscribe())
	if st.overLimit(ts, typeURL, n, len(ts.names)+subs) {
		st.mu.Unlock()
		verdict.report(st)
		return nil
	}
	add, remove, wildcard := st.subscribeDelta(ts, typeURL, req)
	spellings := st.spellings(ts, add, remove, req.GetResourceNamesSubscribe(), req.GetResourceLocatorsSubscribe())
	cm := st.commitLocked(ts, typeURL, Change{Add: add, Remove: remove, Wildcard: wildcard, Spellings: spellings})
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
		st.initialVersions(ts, req)
	}
	capable := keying.WildcardCapable(typeURL)
	wild := ts.wildcard
	if first && capable && len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 &&
		len(req.GetResourceLocatorsSubscribe()) == 0 {
		wild = true
	}
	subs, unsubs := st.deltaKeys(ts, req)
	for _, n := range subs {
		switch {
		case n == keying.Wildcard:
			wild = capable
		case n == "":
		default:
			if _, ok := ts.names[n]; !ok {
				ts.names[n] = struct{}{}
				add = append(add, n)
				ts.hasGlobs = ts.hasGlobs || keying.IsGlob(n)
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
				// The client drops what it unsubscribed, brought from
				// elsewhere or not; if the wildcard still covers it, the
				// answer to the unsubscription resends it.
				delete(ts.holds, n)
				delete(ts.initial, n)
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
					delete(ts.initial, n)
					ts.unwild = append(ts.unwild, n)
				}
			}
		}
	}
	return add, remove, wildcard
}

// initialVersions records what the client holds from elsewhere, as the
// first request of a type tells in initial_resource_versions. Called with
// mu held.
func (st *stream) initialVersions(ts *typeState, req *discoverypb.DeltaDiscoveryRequest) {
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
			ts.holdAs(k, n)
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

// deltaKeys returns the subscription keys a request subscribes and
// unsubscribes, names and TP2 locators, and records the keys that came as
// locators in wrapped. Called with mu held.
func (st *stream) deltaKeys(ts *typeState, req *discoverypb.DeltaDiscoveryRequest) (subs, unsubs []string) {
	subs, unsubs = keysOf(st, req.GetResourceNamesSubscribe()), keysOf(st, req.GetResourceNamesUnsubscribe())
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
	return subs, unsubs
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
	key         string // the subscription key it answers (not encoded)
	name        string
	tp2         bool
	constraints string
	wire        []byte
}

// removal returns the removal of the variant r for a TP2 subscriber of key.
func (r *Resource) removal(key string) removal {
	return removal{key: key, name: r.Name, tp2: true, constraints: r.Constraints, wire: r.ConstraintsWire}
}

// delta returns the encoded incremental response carrying send and removed,
// memoized so that every stream sending the same change shares the bytes.
// Resources are wrapped as w says; beats are TTL heartbeats.
func (v *View) delta(send, beats []*Resource, removed []removal, errs []*ResourceError, w wrap) *body {
	var sb strings.Builder
	sb.WriteString("d\x00")
	for _, r := range send {
		w.mark(&sb, r)
		writeMemoName(&sb, r)
	}
	sb.WriteString("\x00~")
	for _, r := range beats {
		writeMemoName(&sb, r)
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

// writeMemoName writes r's key into a memo key, and the name it is sent
// under when that is not the key: each spelling is encoded apart
// (spelling.go).
func writeMemoName(sb *strings.Builder, r *Resource) {
	sb.WriteString(r.key())
	if n := r.sentName(); n != r.key() {
		sb.WriteByte(1)
		sb.WriteString(n)
	}
	sb.WriteByte(0)
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
