package downstream

import (
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

// spellings records how the client spelled the plain keys it added, when
// not canonically, forgets the keys it removed, and returns the new
// spellings for the Source (nil when there are none). names are the
// request's names as the client wrote them. Called with mu held.
func (st *stream) spellings(ts *typeState, add, remove, names []string) map[string]string {
	for _, k := range remove {
		delete(ts.spelled, k)
	}
	if len(add) == 0 {
		return nil
	}
	var written map[string]string // key → the client's name
	for _, n := range names {
		if k := st.key(n); k != n && keying.IsXDSTP(n) && !keying.HasParams(k) {
			if written == nil {
				written = make(map[string]string)
			}
			written[k] = n
		}
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
			out[k], ts.spelled[k] = n, n
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
		if n, ok := ts.spelled[rm.name]; ok && !rm.tp2 {
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

// spelledAs returns the plain resource r under another name: the same
// resource as a client spelled its xdstp name.
func (r *Resource) spelledAs(name string) *Resource {
	root := r.Root()
	return &Resource{Name: name, Version: r.Version, Any: root.Any, Authority: root.Authority, Listed: root.Listed,
		Glob: root.Glob, UpstreamVersion: root.UpstreamVersion, TTL: root.TTL}
}
