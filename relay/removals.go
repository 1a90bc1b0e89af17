package relay

// The upstream's word that names are gone: explicit deletions, names a
// full-state response left out, and TP3 resource errors.

import (
	"slices"

	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// remove drops name from the cache (every variant of a name in variant
// mode).
func (a *applier) remove(name string) {
	tc := a.tc
	if tc.variantMode(name) {
		tc.setVariants(name, nil)
		a.resolved[name] = true
		return
	}
	a.list(name, false) // the default servers no longer list it
	// (Still listed after that: another authority's name whose own
	// subscription has ended, left to the default servers' word.)
	if cur, ok := a.edit.res[name]; ok && (cur.Authority == a.authority || a.lapsedListing(cur) || a.authority == "" && cur.Listed) {
		a.edit.drop(name)
		tc.clearUnsure(name)
		a.edit.change(name)
		a.s.unref.forget(tc.lruKey(name))
		a.s.armTTL(tc, name, 0)
	}
}

// lapsedListing reports whether cur, another authority's name the cache
// holds from the default servers' listing, is left to its own authority's
// word: their wildcard subscription has ended, so they no longer speak for
// it. While it lasts, their listing may be newer than this stream's word
// (the streams are not ordered), and their own full state drops it.
func (a *applier) lapsedListing(cur *downstream.Resource) bool {
	return cur.Authority == "" && a.authority != "" && ofAuthority(cur.Name, a.authority) && !a.tc.up[keying.Wildcard]
}

// resourceErrors applies the TP3 resource errors: cached per name and
// replayed to later subscribers. NOT_FOUND and PERMISSION_DENIED are data
// errors (the resource is gone for clients); the others are transient
// (clients keep what they have).
func (a *applier) resourceErrors() {
	tc := a.tc
	a.transient = make(map[string]bool, len(a.u.Errors))
	for _, e := range a.u.Errors {
		if _, sent := a.seen[e.Name]; sent {
			continue
		}
		if _, ok := a.owned(e.Name); ok {
			continue
		}
		if e.Constraints != nil {
			a.variantError(e)
			continue
		}
		a.edit.setError(e.Name, &downstream.ResourceError{Name: e.Name, Code: e.Code, Message: e.Message})
		tc.clearUnreachable(e.Name) // the upstream's word replaces the relay's own
		a.edit.change(e.Name)
		if e.Code == codes.NotFound || e.Code == codes.PermissionDenied {
			a.remove(e.Name)
		} else {
			a.transient[e.Name] = true
		}
	}
}

// variantError applies a TP2 variant's error: it holds for the
// subscriptions whose parameters match its constraints.
func (a *applier) variantError(e upstream.ResourceError) {
	tc := a.tc
	a.edit.ownErrors()
	for _, k := range tc.errorKeys(e.Name, e.Constraints) {
		a.edit.setError(k, &downstream.ResourceError{Name: k, Code: e.Code, Message: e.Message})
		tc.clearUnreachable(k) // the upstream's word replaces the relay's own
		a.edit.change(k)
	}
	if cs, _, _ := constraintsOf(e.Constraints); tc.variantMode(e.Name) &&
		(e.Code == codes.NotFound || e.Code == codes.PermissionDenied) {
		tc.dropVariant(e.Name, cs)
		a.resolved[e.Name] = true
	}
}

// deleted applies the upstream's word that name does not exist: it leaves
// the cache, and a name subscribed as such, or through its glob collection,
// is remembered as absent, so that later subscribers are told at once.
func (a *applier) deleted(name string) {
	tc := a.tc
	if _, ok := a.owned(name); ok {
		a.list(name, false)
		return
	}
	a.removed[name] = true
	tc.clearUnsure(name)
	if _, cached := a.edit.res[name]; cached || tc.variantMode(name) {
		a.remove(name) // every variant of it, too
	}
	if tc.get(name).unreachable() {
		// The relay's own UNAVAILABLE is over: the upstream answered. (A
		// transient error would keep the client its copy of what is gone.)
		a.edit.clearError(name)
		tc.clearUnreachable(name)
		a.edit.change(name)
	}
	if !ofAuthority(name, a.authority) {
		return // the default servers' word on another authority's name
	}
	if _, known := a.edit.absent[name]; !known && (tc.up[name] || tc.globCovered(name)) {
		a.edit.markAbsent(name)
		a.edit.change(name)
	}
}

// fullStateDeletions applies xDS's rule that a resource missing from a SotW
// LDS/CDS response is deleted — judged by what the upstream client knew the
// response answers (u.Removed), never by subscriptions made since, which it
// may not answer yet; and, when it is the wildcard's full set, by the
// response itself.
func (a *applier) fullStateDeletions() {
	u, old := a.u, a.edit.old
	gone := append(slices.Clone(u.Removed), a.globsLacking()...)
	if u.Complete && a.authority == "" {
		for key, cur := range old.Resources {
			if _, ok := a.seen[key]; !ok && key == cur.Name && cur.InWildcard() {
				gone = append(gone, key)
			}
		}
	}
	for _, name := range gone {
		if _, ok := a.seen[name]; !ok && !a.transient[name] {
			a.deleted(name)
		}
	}
}

// deltaDeletions applies Delta's removed_resource_names (TP2 variants) and
// removed_resources, and what the response says of glob collections.
func (a *applier) deltaDeletions() {
	tc := a.tc
	a.deltaGlobs()
	for _, rv := range a.u.RemovedVariants {
		cs, _, _ := constraintsOf(rv.Constraints)
		switch {
		case tc.variantMode(rv.Name):
			tc.dropVariant(rv.Name, cs)
			a.resolved[rv.Name] = true
		case cs == "":
			a.remove(rv.Name)
		}
	}
	for _, name := range a.u.Removed {
		if keying.IsGlob(name) {
			continue // a collection, not a resource (deltaGlobs)
		}
		if tc.variantMode(name) { // it names the variant without constraints (TP2: removed_resource_names the others)
			tc.dropVariant(name, "")
			a.resolved[name] = true
			if ofAuthority(name, a.authority) {
				a.plainGone[name] = true
			}
		} else {
			a.deleted(name)
		}
	}
}
