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
// removals and errors of its Delta responses with them (respell).

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

// respell names what a Delta response carries as the client spelled it.
// Resources named otherwise are copies: their encodings are the client's
// own, and so is the memoized body (its key holds the names). Called with
// mu held.
func (ts *typeState) respell(send, beats []*Resource, rms []removal, errs []*ResourceError) ([]*Resource, []*Resource, []removal, []*ResourceError) {
	if len(ts.spelled) == 0 {
		return send, beats, rms, errs
	}
	resources := func(rs []*Resource) []*Resource {
		var out []*Resource
		for i, r := range rs {
			if n, ok := ts.spelled[r.key()]; ok {
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
	send, beats = resources(send), resources(beats)
	for i, rm := range rms {
		if n, ok := ts.spelled[rm.key]; ok {
			rms[i].name = n
		}
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
	if out != nil {
		errs = out
	}
	return send, beats, rms, errs
}

// spelledAs returns r under another name: the same resource, under the
// same key, as a client spelled its xdstp name.
func (r *Resource) spelledAs(name string) *Resource {
	root := r.Root()
	return &Resource{Name: name, Key: r.key(), Version: r.Version, Any: root.Any, Authority: root.Authority,
		Listed: root.Listed, Glob: root.Glob, UpstreamVersion: root.UpstreamVersion,
		Constraints: root.Constraints, ConstraintsWire: root.ConstraintsWire, TTL: root.TTL}
}
