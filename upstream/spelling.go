package upstream

import (
	"maps"
	"slices"

	"github.com/xds-relay/xds-relay/keying"
)

// Spelling. A client may write an xdstp name in a form other than the
// canonical one the relay keys its cache with (Envoy percent-encodes ':' in
// ids: ".../svc%3A8080"), and control planes match names exactly. So the
// Client subscribes a name, or a TP2 key's name, as it is given to
// Subscribe (the relay passes the spelling of the client that asked for it
// first), while it speaks canonical names with the relay everywhere else:
// Unsubscribe, Forget and InitialVersions take canonical names, and every
// name it reports (Update, Config.Declared) is canonical. A resource keeps
// the server's spelling beside its name (Resource.Spelling): the name to
// give clients that did not spell it themselves.

// spellLocked records how n, a name or a subscription key about to be
// subscribed, is spelled when that is not its canonical form (a key's
// parameters are canonical already). Called with mu held.
func (st *typeState) spellLocked(n string) {
	name, params := keying.SplitSubscriptionKey(n)
	if !keying.IsXDSTP(name) {
		return
	}
	c, err := keying.Canonical(name)
	switch ck := keying.SubscriptionKey(c, params); {
	case err != nil:
	case ck == n:
		delete(st.spelled, ck)
	default:
		if st.spelled == nil {
			st.spelled = make(map[string]string)
		}
		st.spelled[ck] = n
	}
}

// spelling returns the name the server knows the canonical name n by.
// Called with mu held.
func (st *typeState) spelling(n string) string {
	if s, ok := st.spelled[n]; ok {
		return s
	}
	return n
}

// heardLocked records the server's spelling of each name it sent that is
// not canonical, unless the name is subscribed some way already: a
// name the relay did not subscribe itself (a wildcard member) is asked for
// again by it (Forget, InitialVersions), and the server matches names
// exactly. Called with mu held.
func (st *typeState) heardLocked(rs []Resource) {
	for _, r := range rs {
		c := canonical(r.Name)
		_, spelled := st.spelled[c]
		_, named := st.names[c] // subscribed canonically: unsubscribed so
		if spelled || named || c == r.Name {
			continue
		}
		if st.spelled == nil {
			st.spelled = make(map[string]string)
		}
		st.spelled[c] = r.Name
	}
}

// spelledVersions returns the relay's versions (canonical names) under the
// names the server knows them by. Called with mu held.
func (st *typeState) spelledVersions(v map[string]string) map[string]string {
	if len(st.spelled) == 0 || len(v) == 0 {
		return v
	}
	out := make(map[string]string, len(v))
	for n, ver := range v {
		out[st.spelling(n)] = ver
	}
	return out
}

// canonical returns the relay's name of a name the server sent.
func canonical(n string) string {
	if c, err := keying.Canonical(n); err == nil {
		return c
	}
	return n
}

// canonicalized returns xs with every name (name points into an element)
// canonical, copying xs only when a name changes (changed).
func canonicalized[T any](xs []T, name func(*T) *string) (out []T, changed bool) {
	out = xs
	for i := range xs {
		n := *name(&xs[i])
		if c := canonical(n); c != n {
			if !changed {
				out, changed = slices.Clone(xs), true
			}
			*name(&out[i]) = c
		}
	}
	return out, changed
}

func self(s *string) *string { return s }

// canonicalResources is canonicalized for resources: each renamed one keeps
// the server's spelling of its name.
func canonicalResources(rs []Resource) (out []Resource, changed bool) {
	out = rs
	for i, r := range rs {
		if c := canonical(r.Name); c != r.Name {
			if !changed {
				out, changed = slices.Clone(rs), true
			}
			out[i].Name, out[i].Spelling = c, r.Name
		}
	}
	return out, changed
}

// canonicalHandler is the Handler the Client reports to: every name of an
// Update canonical. A removal of a name the same Update carries is dropped:
// the server removed a spelling of it, not the resource.
type canonicalHandler struct{ Handler }

func (h canonicalHandler) OnUpdate(u Update) error {
	var sentChanged, removedChanged bool
	u.Resources, sentChanged = canonicalResources(u.Resources)
	u.Removed, removedChanged = canonicalized(u.Removed, self)
	if (sentChanged || removedChanged) && len(u.Resources) > 0 && len(u.Removed) > 0 {
		sent := make(map[string]bool, len(u.Resources))
		for _, r := range u.Resources {
			sent[r.Name] = true
		}
		u.Removed = slices.DeleteFunc(slices.Clone(u.Removed), func(n string) bool { return sent[n] })
	}
	u.Globs, _ = canonicalized(u.Globs, self)
	u.Keys = canonicalKeys(u.Keys)
	u.RemovedVariants, _ = canonicalized(u.RemovedVariants, func(v *Variant) *string { return &v.Name })
	u.Errors, _ = canonicalized(u.Errors, func(e *ResourceError) *string { return &e.Name })
	return h.Handler.OnUpdate(u)
}

// canonicalKeys returns the subscription keys with their names canonical.
func canonicalKeys(keys map[string]struct{}) map[string]struct{} {
	var out map[string]struct{}
	for k := range keys {
		if n, params := keying.SplitSubscriptionKey(k); canonical(n) != n {
			if out == nil {
				out = maps.Clone(keys)
			}
			delete(out, k)
			out[keying.SubscriptionKey(canonical(n), params)] = struct{}{}
		}
	}
	if out == nil {
		return keys
	}
	return out
}

// Spelling returns the name (or TP2 key) the server was asked for the
// canonical name n by: the spelling it was last subscribed with, else n.
func (c *Client) Spelling(typeURL, n string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.types[typeURL]; ok {
		return st.spelling(n)
	}
	return n
}
