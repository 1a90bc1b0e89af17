package downstream

import (
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// Spelling. Streams key their subscriptions by canonical names (canonical),
// so that one resource is one cache entry however clients write it; but a
// client may write an xdstp name in another form (Envoy percent-encodes ':'
// in ids), and it must be answered — and the upstream asked — with the name
// it used. A stream keeps the spellings of the names it subscribes to that
// are not canonical (typeState.spelled), hands them to the Source with the
// subscription change (Change.Spellings), and names the resources,
// removals and errors of its Delta responses with them (respell), and the
// errors of its SotW responses (spellErrors). A name
// the client did not spell (the wildcard or a glob gave it) it gets as the
// upstream spelled it, the name on the View's shared encodings.

// spellings records how the client spelled the keys it added, when not
// canonically, forgets the keys it removed, and returns the new spellings
// for the Source (nil when there are none): each key as the upstream is to
// be asked for it, its parameters kept. names and locs are the request's
// names and TP2 locators as the client wrote them. Called with mu held.
func (st *stream) spellings(ts *typeState, add, remove, names []string, locs []*discoverypb.ResourceLocator) map[string]string {
	for _, k := range remove {
		delete(ts.spelled, k)
	}
	if len(add) == 0 {
		return nil
	}
	var written map[string]string // key → the client's name
	note := func(k, n string) {
		if c, _ := keying.SplitSubscriptionKey(k); c != n && keying.IsXDSTP(n) {
			if written == nil {
				written = make(map[string]string)
			}
			written[k] = n
		}
	}
	for _, n := range names {
		note(st.key(n), n)
	}
	for _, l := range locs {
		note(locatorKey(l), l.GetName())
	}
	var out map[string]string
	for _, k := range add {
		if n, ok := written[k]; ok {
			if out == nil {
				out = make(map[string]string)
			}
			if ts.spelled == nil {
				ts.spelled = make(map[string]string)
			}
			_, params := keying.SplitSubscriptionKey(k)
			out[k], ts.spelled[k] = keying.SubscriptionKey(n, params), n
		}
	}
	return out
}

// respell names what a Delta response carries as the client knows it: a
// resource it named, as it spelled it; one the wildcard or a glob gave it,
// as it holds it or else as the upstream spelled it (Resource.Spelling),
// the name it will compare and unsubscribe. Resources named otherwise than
// the View's copy are copies: their encodings are the client's own, and so
// is the memoized body (its key holds the names). Called with mu held.
func (ts *typeState) respell(send, beats []*Resource, rms []removal, errs []*ResourceError) ([]*Resource, []*Resource, []removal, []*ResourceError) {
	for i, rm := range rms {
		if n, ok := ts.spelled[rm.key]; ok {
			rms[i].name = n
		} else if n, ok := ts.heldAs[rm.key]; ok && !rm.tp2 {
			rms[i].name = n
		}
		delete(ts.heldAs, rm.key)
	}
	send, beats = ts.respelled(send), ts.respelled(beats)
	return send, beats, rms, ts.spellErrors(errs)
}

// spellErrors names errs as the client spelled their keys (SotW and Delta
// alike): under the canonical key it would match none of its names, and a
// full-state response without its resource deletes it. Only errors named
// otherwise are copies. Called with mu held.
func (ts *typeState) spellErrors(errs []*ResourceError) []*ResourceError {
	if len(ts.spelled) == 0 {
		return errs
	}
	var out []*ResourceError
	for i, e := range errs {
		if n, ok := ts.spelled[e.Name]; ok {
			if out == nil {
				out = append([]*ResourceError(nil), errs...)
			}
			out[i] = &ResourceError{Name: n, Code: e.Code, Message: e.Message}
		}
	}
	if out == nil {
		return errs
	}
	return out
}

// respelled returns rs, copied only when a resource is to be named
// otherwise than the View's copy (nameFor).
func (ts *typeState) respelled(rs []*Resource) []*Resource {
	var out []*Resource
	for i, r := range rs {
		if r.Spelling == "" && len(ts.spelled) == 0 && len(ts.heldAs) == 0 {
			continue // named canonically, however the client came by it
		}
		if n, other := ts.nameFor(r); other {
			if out == nil {
				out = append([]*Resource(nil), rs...)
			}
			out[i] = r.spelledAs(n)
		}
	}
	if out == nil {
		return rs
	}
	return out
}

// nameFor returns the name the client is to know r by, and whether that
// calls for a copy of r: the client's spelling of a key it subscribed, else
// the canonical name of a key it named canonically, else (the wildcard or a
// glob gave it) the name it holds it under or the upstream's (noted in
// heldAs). Called with mu held.
func (ts *typeState) nameFor(r *Resource) (name string, other bool) {
	k := r.key()
	if n, ok := ts.spelled[k]; ok {
		return n, true
	}
	if _, named := ts.names[k]; named {
		return r.Name, r.Spelling != ""
	}
	n := r.sentName()
	if h, ok := ts.heldAs[k]; ok {
		n = h
	}
	ts.holdAs(k, n)
	return n, n != r.sentName()
}

// holdAs notes the name n the client holds key k under, when not the key's
// own. Called with mu held.
func (ts *typeState) holdAs(k, n string) {
	if c, _ := keying.SplitSubscriptionKey(k); c == n {
		delete(ts.heldAs, k)
		return
	}
	if ts.heldAs == nil {
		ts.heldAs = make(map[string]string)
	}
	ts.heldAs[k] = n
}

// sentName is the name r's own encodings carry: the upstream's spelling.
func (r *Resource) sentName() string {
	if r.Spelling != "" {
		return r.Spelling
	}
	return r.Name
}

// spelledAs returns r under another name: the same resource, under the
// same key, as a client spelled its xdstp name.
func (r *Resource) spelledAs(name string) *Resource {
	root := r.Root()
	return &Resource{Name: name, Key: r.key(), Version: r.Version, Any: root.Any, Authority: root.Authority,
		Listed: root.Listed, Glob: root.Glob, UpstreamVersion: root.UpstreamVersion,
		Constraints: root.Constraints, ConstraintsWire: root.ConstraintsWire, TTL: root.TTL}
}
