package downstream

import (
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// Make before break (xDS "eventual consistency considerations"): a client
// must never hold a route to a cluster it no longer has, nor a cluster
// without its endpoints. An upstream that sends a snapshot type by type —
// go-control-plane's ordered ADS sends CDS before RDS — breaks first: the
// CDS without c2 arrives before the RDS that moves the route from c2 to c3.
// So on an ADS stream, where one stream carries every type in order, a
// removal of a Cluster, RouteConfiguration or ClusterLoadAssignment (SotW
// LDS/CDS omission, Delta removal) is held back while the client holds a
// resource that refers to it (keying.References), and sent once what the
// client holds no longer does. The held resource is sent as the client holds
// it. Opaque types keep the upstream's order only.
//
// An upstream whose own state refers to a resource it deleted keeps the
// client holding that resource until the reference goes: the client keeps
// working, and xds_relay_removals_held_total{reason="referenced"} counts it.

// refs returns what r refers to (keying.References), parsed once per stored
// variant.
func (r *Resource) refs(typeURL string) keying.Refs {
	root := r.Root()
	root.refsOnce.Do(func() { root.refsOf = keying.References(typeURL, anyValue(root.Any)) })
	return root.refsOf
}

// refsState is the parsed references of a stored variant.
type refsState struct {
	refsOnce sync.Once
	refsOf   keying.Refs
}

// anyValue returns the value field of a serialized google.protobuf.Any.
func anyValue(b []byte) []byte {
	var val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		if num == 2 && typ == protowire.BytesType {
			val, _ = protowire.ConsumeBytes(b)
		}
		b = b[m:]
	}
	return val
}

// referenced reports whether the client of this ADS stream holds a resource
// that refers to key of typeURL. Called with mu held.
func (st *stream) referenced(typeURL, key string) bool {
	if st.typeURL != "" {
		return false // per-type streams: the other types travel elsewhere
	}
	for _, rt := range keying.Referrers(typeURL) {
		rts := st.types[rt]
		if rts == nil {
			continue
		}
		found := false
		rts.eachHeld(func(r *Resource) bool {
			found = slices.Contains(r.refs(rt)[typeURL], key)
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// eachHeld calls f with each resource the client holds of the type, as far
// as the stream knows (what it sent last, and what it keeps back), until f
// returns false. Called with mu held.
func (ts *typeState) eachHeld(f func(*Resource) bool) {
	visit := func(k string) bool {
		if r, ok := ts.kept[k]; ok {
			return r == nil || f(r) // nil: held from elsewhere, content unknown
		}
		if ts.lastView != nil {
			if r, ok := ts.lastView.Resources[k]; ok {
				return f(r)
			}
		}
		return true
	}
	var held map[string]struct{}
	switch {
	case ts.has != nil: // Delta: what the client holds
		for k := range ts.has {
			if !visit(k) {
				return
			}
		}
		return
	case ts.heldKeys != nil: // SotW LDS/CDS: the last full state sent
		held = ts.heldKeys
	default: // SotW, the other types: each subscribed name as last sent
		held = ts.names
	}
	for k := range held {
		if ts.subscribesKey(k) && !visit(k) {
			return
		}
	}
}

// subscribesKey reports whether the stream subscribes to key by name or by
// the wildcard (plain names of the default authority).
func (ts *typeState) subscribesKey(key string) bool {
	if _, ok := ts.names[key]; ok {
		return true
	}
	auth, _ := keying.Authority(key)
	return ts.wildcard && auth == "" && !keying.HasParams(key)
}

// keepReferenced holds back the removal of key from a Delta client while it
// holds a resource referring to it; it reports whether it did. Called with
// mu held.
func (st *stream) keepReferenced(ts *typeState, v *View, key string) bool {
	if !st.referenced(v.TypeURL, key) {
		delete(ts.kept, key)
		return false
	}
	if _, ok := ts.kept[key]; !ok {
		if ts.kept == nil {
			ts.kept = make(map[string]*Resource)
		}
		var r *Resource // nil when the client brought it from elsewhere
		if ts.lastView != nil {
			r = ts.lastView.Resources[key]
		}
		ts.kept[key] = r
	}
	st.hold(ts, v.TypeURL, "referenced")
	return true
}

// keptFull returns the resources a full-state response built from v must
// still carry: those the client holds, still subscribes to, that v dropped
// and that something the client holds refers to. Called with mu held.
func (st *stream) keptFull(ts *typeState, v *View, b *body) []*Resource {
	if st.typeURL != "" || len(keying.Referrers(v.TypeURL)) == 0 {
		return nil
	}
	var keep []*Resource
	for k := range ts.heldKeys {
		if _, in := b.keys[k]; in || !ts.subscribes(v, k) {
			continue
		}
		if _, present := v.Resources[k]; present {
			continue
		}
		if !st.referenced(v.TypeURL, k) {
			continue
		}
		r, ok := ts.kept[k]
		if !ok && ts.lastView != nil {
			r, ok = ts.lastView.Resources[k]
		}
		if ok {
			keep = append(keep, r)
		}
	}
	slices.SortFunc(keep, byName)
	return keep
}

// releaseKept looks again, after the client's resources of typeURL changed
// (a response sent, names unsubscribed), at what the stream keeps back of
// the types they refer to: a kept resource nothing refers to any more is
// queued for its removal. It reports whether it queued anything. Called
// with mu held.
func (st *stream) releaseKept(typeURL string) bool {
	queued := false
	for _, t := range keying.Referenced(typeURL) {
		ts := st.types[t]
		if ts == nil || len(ts.kept) == 0 || ts.latest == nil {
			continue
		}
		var free []string
		for k := range ts.kept {
			if !st.referenced(t, k) {
				free = append(free, k)
			}
		}
		if len(free) > 0 {
			st.q.pushNames(ts.latest, free)
			queued = true
		}
	}
	return queued
}
