package downstream

import (
	"github.com/xds-relay/xds-relay/internal/metrics"
	"github.com/xds-relay/xds-relay/keying"
)

// Never tell a client its config is gone when it isn't. A resource missing
// from a SotW LDS/CDS response, or named in a Delta removal, is deleted on the
// client: for an Envoy that drops a listener's connections or empties a pool.
// A relay's cache can lack what exists upstream — cold after a restart, on a
// new replica, while the upstream is away — so a stream tells its client a
// resource is gone only when the View knows it (View.Gone: the upstream said
// so, or it is missing from the complete wildcard set), and never from
// unconfirmed data (View.Stale: the authority's upstream is away or has not
// answered since) to a client that holds config from elsewhere. Until then the
// response (SotW) or the removal (Delta) is withheld: the client keeps what
// it has. Each hold is counted (xds_relay_removals_held_total) and logged.
//
// Silence is not the upstream's word. What the relay knows only from it —
// a name its does-not-exist timer answered, a wildcard set settled because the
// upstream said nothing more — is "unfound" (not found yet: View.Unfound).
// It answers a client that holds nothing of it (View.Known: a grpc client
// waiting to hear that a name does not exist, a new wildcard client), and
// never tells a client that something it holds is gone.

// losesNothing reports whether the full-state response b drops nothing the
// client may hold without the View knowing it is gone: what the stream sent
// last, or, for a client that came with config from elsewhere, everything
// it subscribes to by name and every member of its glob collections (known
// only once the upstream answered the glob's set). A name the client no
// longer subscribes to, or may not have (denied), may go. Called with mu
// held.
func (ts *typeState) losesNothing(v *View, b *body) bool {
	lost := func(k string) bool { return !b.has(k) && !ts.mayGo(v, k) }
	if ts.fromElsewhere {
		for k := range ts.names {
			if keying.IsGlob(k) {
				if !v.GlobAnswered(k) {
					return false
				}
			} else if lost(k) {
				return false
			}
		}
	}
	for k := range ts.holdsKeys {
		if ts.subscribes(v, k) && lost(k) {
			return false
		}
	}
	return true
}

// mayGo reports whether a full-state response may leave out key, which the
// stream subscribes to: the View knows it is gone, or the client may not
// have it (denied). Called with mu held.
func (ts *typeState) mayGo(v *View, key string) bool {
	_, denied := ts.denied[key]
	return denied || v.Gone(key)
}

// staleIn reports whether v's copy of what the stream subscribes to may be
// older than what its client brought from elsewhere: its authority's word
// is unconfirmed (View.Stale), or a cached name it covers is unsure
// (View.Unsure). A full-state response cannot leave that name out, so the
// whole response waits. Called with mu held.
func (ts *typeState) staleIn(v *View) bool {
	if len(v.Unconfirmed) == 0 && len(v.Unsure) == 0 {
		return false
	}
	if ts.wildcard && v.Stale(keying.Wildcard) {
		return true
	}
	for k := range ts.names {
		if v.Stale(k) {
			return true
		}
	}
	for k := range v.Unsure {
		if ts.subscribes(v, k) {
			return true
		}
	}
	return false
}

// subscribes reports whether the stream still subscribes to key: by name,
// through its glob collection, or, for a plain name of the default
// authority, through the wildcard.
func (ts *typeState) subscribes(v *View, key string) bool {
	if ts.watches(v, key) {
		return true
	}
	auth, _ := keying.Authority(key)
	return ts.wildcard && auth == "" && !keying.HasParams(key)
}

// checkRemoval reports whether a Delta stream may tell its client that key,
// which it holds, is gone: the View knows it (or the client holds the copy
// the relay withdrew: View.Withdrew), and not from unconfirmed data
// (View.Stale) when the client brought the resource from elsewhere. If not,
// it withholds the removal (looked at again with every later change).
// Called with mu held.
func (st *stream) checkRemoval(ts *typeState, v *View, key string) bool {
	_, brought := ts.initial[key]
	gone := v.Gone(key) || v.Withdrew(key, ts.holds[key])
	if gone && !(brought && v.Stale(key)) {
		delete(ts.withheld, key)
		return true
	}
	reason := "unknown"
	if v.Stale(key) {
		reason = "stale"
	}
	if ts.withheld == nil {
		ts.withheld = make(map[string]struct{})
	}
	ts.withheld[key] = struct{}{} // looked at again with every later change
	st.noteWithheld(ts, v.TypeURL, reason)
	return false
}

// withholdFull withholds a full-state response: it returns nil (nothing sent).
// A client that holds nothing yet loses nothing by waiting: only a hold of
// what it may hold is counted. Called with mu held.
func (st *stream) withholdFull(ts *typeState, v *View, reason string) *body {
	if len(ts.holdsKeys) > 0 || ts.fromElsewhere {
		st.noteWithheld(ts, v.TypeURL, reason)
	}
	return nil
}

// noteWithheld records that a removal is withheld from the client, once per
// episode of the stream: counted, and logged at Warn once per episode over
// all streams (logHeld), because it means the relay would have told the
// client its config is gone. Called with mu held.
func (st *stream) noteWithheld(ts *typeState, typeURL, reason string) {
	if ts.withholding == reason {
		return
	}
	ts.withholding = reason
	st.srv.m.RemovalsHeld.WithLabelValues(metrics.TypeLabel(typeURL), reason).Inc()
	st.logHeld(typeURL, reason)
}

// withholdReasons say why a removal is withheld, by reason label.
var withholdReasons = map[string]string{
	"unknown":    "the cache does not know the resource is gone",
	"stale":      "the cache is not confirmed by a live upstream and the client brought config from elsewhere",
	"referenced": "the client still holds something that refers to it (make before break)",
}

// released ends a hold episode of the type: a response went out, keeping
// nothing back. Called with mu held.
func (st *stream) endWithholding(ts *typeState, typeURL string) {
	if len(ts.withheldRefs) == 0 {
		ts.withholding = ""
	}
}
