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
			return recvErr(err)
		}
		if err := st.handleDelta(req); err != nil {
			return err
		}
	}
}

// handleDelta applies one incremental request. xDS: subscription changes are
// honoured whatever the nonce; ACK/NACK is per response nonce.
func (st *stream) handleDelta(req *discoverypb.DeltaDiscoveryRequest) error {
	n := len(req.GetResourceNamesSubscribe()) + len(req.GetResourceNamesUnsubscribe()) + len(req.GetInitialResourceVersions())
	typeURL, err := st.prelude(req.GetTypeUrl(), n, req.GetNode())
	if err != nil {
		return err
	}
	st.mu.Lock()
	ts := st.state(typeURL)
	var verdict Rollout
	if nonce := req.GetResponseNonce(); nonce != "" {
		verdict = ts.verdict(nonce)
		if d := req.GetErrorDetail(); d != nil {
			// NACK: the versions sent stay recorded as held, so they are not
			// resent; the next change of a resource is.
			st.nacked(ts, typeURL, nonce, d.GetMessage())
		} else if nonce == ts.lastNonce {
			st.acked(ts, typeURL, ts.sentVersion)
		} else {
			st.srv.m.ACKs.WithLabelValues(metricsType(typeURL), st.proto).Inc()
		}
	}
	add, remove, wildcard := ts.subscribeDelta(typeURL, req)
	return st.commit(ts, typeURL, Change{Add: add, Remove: remove, Wildcard: wildcard}, verdict, req.GetErrorDetail())
}

// subscribeDelta applies a request's subscription changes and returns them.
// xDS: "*" subscribes to the wildcard (LDS/CDS); so does a first request
// that names nothing (legacy). initial_resource_versions, on the first
// request of a type, tell what the client already holds.
func (ts *typeState) subscribeDelta(typeURL string, req *discoverypb.DeltaDiscoveryRequest) (add, remove []string, wildcard *bool) {
	if ts.has == nil {
		ts.has = make(map[string]string)
	}
	first := !ts.requested
	ts.requested = true
	if first {
		for n, v := range req.GetInitialResourceVersions() {
			ts.has[canonical(n)] = v
		}
	}
	capable := keying.WildcardCapable(typeURL)
	wild := ts.wildcard
	if first && capable && len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 {
		wild = true
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		n = canonical(n)
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
	for _, n := range req.GetResourceNamesUnsubscribe() {
		n = canonical(n)
		switch {
		case n == keying.Wildcard:
			wild = false
		default:
			if _, ok := ts.names[n]; ok {
				delete(ts.names, n)
				// The client drops what it unsubscribed; if the wildcard still
				// covers it, the answer to the unsubscription resends it.
				delete(ts.has, n)
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
			for n := range ts.has {
				if _, named := ts.names[n]; !named {
					delete(ts.has, n)
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
	v := it.view
	ts := st.types[v.TypeURL]
	if ts == nil || ts.has == nil {
		return nil
	}
	var send []*Resource
	var removed []string
	var errs []*ResourceError
	sendIfNew := func(r *Resource) {
		if ts.has[r.Name] != r.Version {
			ts.has[r.Name] = r.Version
			send = append(send, r)
		}
	}
	consider := func(n string, forced bool) {
		if isGlob(n) {
			if forced {
				for _, r := range v.members(n) { // a new glob subscription
					sendIfNew(r)
				}
			}
			return
		}
		r, present := v.Resources[n]
		named := ts.watches(v, n)
		covered := ts.wildcard && (!present || r.Authority == "")
		switch {
		case named || (covered && present):
			if e, failed := ts.errorFor(v, n); failed && named && (!present || ts.denied[n] != nil) {
				// TP3: the error, and for NOT_FOUND also a removal.
				errs = append(errs, e)
				delete(ts.has, n)
				if e.NotFound() {
					removed = append(removed, n)
				}
			} else if present {
				sendIfNew(r)
			} else if _, held := ts.has[n]; held {
				delete(ts.has, n)
				removed = append(removed, n)
			} else if _, gone := v.Absent[n]; gone && named {
				removed = append(removed, n) // the upstream says it does not exist
			}
		case forced && ts.wildcard:
			// xDS: unsubscribing a name the wildcard may cover is answered
			// by the resource or by its removal.
			removed = append(removed, n)
		case covered:
			if _, held := ts.has[n]; held {
				delete(ts.has, n)
				removed = append(removed, n)
			}
		}
	}
	for n := range it.names {
		consider(n, false)
	}
	for n := range it.force {
		if n == keying.Wildcard {
			continue
		}
		if _, dup := it.names[n]; !dup {
			consider(n, true)
		}
	}
	if len(ts.unwild) > 0 && hasKey(it.force, keying.Wildcard) {
		// What only a dropped wildcard covered is removed — unless the
		// wildcard is back and still covers it: its answer resends it.
		for _, n := range ts.unwild {
			if r, ok := v.Resources[n]; ok && ts.wildcard && r.Authority == "" {
				continue
			}
			removed = append(removed, n)
		}
		ts.unwild = nil
	}
	answerWildcard := false
	if ts.wildcard && v.Complete && (ts.wildPending || hasKey(it.force, keying.Wildcard)) {
		for _, r := range v.wildcard() {
			sendIfNew(r)
		}
		for n := range ts.has {
			if _, named := ts.names[n]; !named {
				if _, present := v.Resources[n]; !present && !strings.HasPrefix(n, "xdstp:") {
					delete(ts.has, n)
					removed = append(removed, n)
				}
			}
		}
		answerWildcard = ts.wildPending
		ts.wildPending = false
	}
	if len(send) == 0 && len(removed) == 0 && len(errs) == 0 && !answerWildcard {
		return nil
	}
	slices.SortFunc(send, byName)
	slices.Sort(removed)
	removed = slices.Compact(removed)
	// Never a name both sent and removed in one response.
	removed = slices.DeleteFunc(removed, func(n string) bool {
		_, sent := slices.BinarySearchFunc(send, n, func(r *Resource, n string) int { return strings.Compare(r.Name, n) })
		return sent
	})
	sortErrors(errs)
	b := v.delta(send, removed, errs)
	nonce := st.nextNonce()
	ts.lastNonce = nonce
	ts.sentVersion = b.version
	if it.canary != nil {
		ts.canary, ts.canaryNonce = it.canary, nonce
	}
	ts.sentAt = time.Time{}
	if len(it.names) > 0 && !v.Received.IsZero() {
		ts.sentAt = v.Received
	}
	return newEncoded(b.bytes, deltaNonce, nonce)
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
)

// delta returns the encoded incremental response carrying send and removed,
// memoized so that every stream sending the same change shares the bytes.
func (v *View) delta(send []*Resource, removed []string, errs []*ResourceError) *body {
	var sb strings.Builder
	sb.WriteString("d\x00")
	for _, r := range send {
		sb.WriteString(r.Name)
		sb.WriteByte(0)
	}
	sb.WriteString("\x00-")
	for _, n := range removed {
		sb.WriteString(n)
		sb.WriteByte(0)
	}
	if len(errs) > 0 {
		sb.WriteString(errorKey(errs))
	}
	return v.memoized(sb.String(), func() *body { return encodeDelta(v.TypeURL, send, removed, errs) })
}

// deltaBytes is the resource wrapped as envoy.service.discovery.v3.Resource
// (name, version, Any), encoded once per resource.
func (r *Resource) deltaBytes() []byte {
	r.deltaOnce.Do(func() {
		n := protowire.SizeTag(resourceName) + protowire.SizeBytes(len(r.Name)) +
			protowire.SizeTag(resourceVersion) + protowire.SizeBytes(len(r.Version)) +
			protowire.SizeTag(resourceBody) + protowire.SizeBytes(len(r.Any))
		b := make([]byte, 0, n)
		b = protowire.AppendTag(b, resourceVersion, protowire.BytesType)
		b = protowire.AppendString(b, r.Version)
		b = protowire.AppendTag(b, resourceBody, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Any)
		b = protowire.AppendTag(b, resourceName, protowire.BytesType)
		b = protowire.AppendString(b, r.Name)
		r.delta = b
	})
	return r.delta
}

func encodeDelta(typeURL string, send []*Resource, removed []string, errs []*ResourceError) *body {
	version := setVersion(send, errs)
	var b []byte
	b = protowire.AppendTag(b, deltaSystemVersion, protowire.BytesType)
	b = protowire.AppendString(b, version)
	for _, r := range send {
		b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r.deltaBytes())
	}
	b = protowire.AppendTag(b, deltaTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	for _, n := range removed {
		b = protowire.AppendTag(b, deltaRemoved, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	b = appendErrors(b, deltaResourceErrors, errs)
	return &body{bytes: b, version: version, count: len(send)}
}
