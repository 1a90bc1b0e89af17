package relay

import (
	"maps"
	"slices"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// xRFC TP2: the cache key is (type, name, constraints). A type's View holds,
// per subscription key — a name, or a name with dynamic parameters
// (keying.SubscriptionKey) — the variant that key selects; the variants
// themselves are stored once, in the name's entry (entry.variants), for the
// names that have more than their one unconstrained variant. Every selection
// of a variant shares its bytes and encodings (downstream.Resource.Selected).

// variant is one stored variant of a resource.
type variant struct {
	res *downstream.Resource
	c   *discoverypb.DynamicParameterConstraints
}

// variantMode reports whether name's View entries are selections from
// stored variants.
func (tc *typeCache) variantMode(name string) bool {
	return tc.get(name).variantMode
}

// setVariants makes vs name's stored variants, in variant mode.
func (tc *typeCache) setVariants(name string, vs []variant) {
	e := tc.entry(name)
	e.variantMode, e.variants = true, vs
}

// leaveVariantMode forgets name's stored variants: its View entry is its
// only variant again.
func (tc *typeCache) leaveVariantMode(name string) {
	if e := tc.names[name]; e != nil && e.variantMode {
		e.variantMode, e.variants = false, nil
		tc.tidy(name)
	}
}

// enterVariantMode starts storing name's variants apart from the View, seeded
// with its plain entry in res.
func (tc *typeCache) enterVariantMode(name string, res map[string]*downstream.Resource) {
	if tc.variantMode(name) {
		return
	}
	var vs []variant
	if r, ok := res[name]; ok && r.Constraints == "" {
		vs = append(vs, variant{res: r.Root()})
	}
	tc.setVariants(name, vs)
}

// putVariant stores v, replacing the variant with the same constraints
// unless that one has the same bytes (it stays: nothing changed).
func (tc *typeCache) putVariant(v variant) {
	name := v.res.Name
	vs := tc.get(name).variants
	for i := range vs {
		if vs[i].res.Constraints == v.res.Constraints {
			if vs[i].res.Version != v.res.Version || vs[i].res.Authority != v.res.Authority {
				vs[i] = v
			}
			return
		}
	}
	tc.setVariants(name, append(vs, v))
}

// relist replaces the stored variant res by its copy listed, or not, in the
// default servers' wildcard answer.
func (tc *typeCache) relist(res *downstream.Resource, listed bool) {
	vs := tc.get(res.Name).variants
	for i := range vs {
		if vs[i].res == res {
			vs[i].res = res.WithListed(listed)
		}
	}
}

// dropVariant removes the variant of name with canonical constraints c.
func (tc *typeCache) dropVariant(name, c string) {
	tc.setVariants(name, slices.DeleteFunc(tc.get(name).variants, func(v variant) bool { return v.res.Constraints == c }))
}

// keysOf returns name's keys the View may hold: the name itself and its
// keys with parameters, sorted.
func (tc *typeCache) keysOf(name string) []string {
	keys := append([]string{name}, slices.Sorted(maps.Keys(tc.get(name).params))...)
	return keys
}

// paramsOf returns the dynamic parameters of a key of name (nil for the
// name itself), parsed when the key was added.
func (tc *typeCache) paramsOf(name, key string) map[string]string {
	return tc.get(name).params[key]
}

// resolveVariants recomputes, in e, the View entries of every key of name
// from its stored variants. A name left with one unconstrained variant and no
// keys with parameters leaves variant mode.
func (s *state) resolveVariants(tc *typeCache, name string, e *viewEdit) {
	vs := tc.get(name).variants
	cands := candidates(vs)
	for _, k := range tc.keysOf(name) {
		sel := s.selectVariant(tc, k, tc.paramsOf(name, k), vs, cands)
		cur, had := e.res[k]
		switch {
		case sel == nil && had:
			e.drop(k)
			tc.clearUnsure(k)
			e.change(k)
		case sel != nil && (!had || cur.Root() != sel):
			e.put(k, sel.Selected(k))
			e.change(k)
		}
	}
	if len(tc.get(name).params) == 0 && !slices.ContainsFunc(vs, func(v variant) bool { return v.res.Constraints != "" }) {
		tc.leaveVariantMode(name)
	}
}

// candidates returns vs as keying.Select takes them.
func candidates(vs []variant) []keying.Variant {
	cands := make([]keying.Variant, len(vs))
	for i, v := range vs {
		cands[i] = keying.Variant{Constraints: v.c, Key: v.res.Constraints}
	}
	return cands
}

// selectVariant returns the variant of vs (cands, as candidates returns
// them) that the subscription key with params selects, nil for none. TP2
// leaves several matches undefined: the most specific wins (keying.Select),
// and the ambiguity is counted and logged.
func (s *state) selectVariant(tc *typeCache, key string, params map[string]string, vs []variant, cands []keying.Variant) *downstream.Resource {
	best, ambiguous, ok := keying.Select(cands, params)
	if !ok {
		return nil
	}
	var sel *downstream.Resource
	for i := range cands {
		if cands[i].Key == best.Key {
			sel = vs[i].res
		}
	}
	if ambiguous {
		s.m.TP2Ambiguous.Inc()
		if cur, ok := tc.view.Resources[key]; !ok || cur.Root() != sel {
			s.log.Warn("TP2: several variants match a subscription; sending the most specific",
				zap.String("type", tc.typeURL), zap.String("subscription", keying.DisplayKey(key)),
				zap.String("constraints", best.Key))
		}
	}
	return sel
}

// addParamKey registers a subscription key with parameters at its first
// watcher and answers it from the stored variants at once: the View gets its
// selection before the watcher is notified. That selection is unsure until
// the upstream answers the key: no subscription kept it current for these
// parameters (a variant stored since the key's last subscription ended, or
// a less specific one), so a client that brings another is not rolled back.
func (s *state) addParamKey(tc *typeCache, key string) {
	name, ps := keying.SplitSubscriptionKey(key)
	if ps == "" {
		return
	}
	known := tc.entry(name)
	if known.params == nil {
		known.params = make(map[string]map[string]string)
	}
	params, _ := keying.ParseParams(ps) // made by keying.CanonicalParams
	known.params[key] = params
	tc.enterVariantMode(name, tc.view.Resources)
	if _, ok := tc.view.Resources[key]; ok {
		return
	}
	vs := tc.get(name).variants
	sel := s.selectVariant(tc, key, params, vs, candidates(vs))
	if sel == nil {
		return
	}
	e := editOf(tc.view)
	e.put(key, sel.Selected(key))
	e.change(key)
	tc.markUnsure(key)
	s.publish(tc, e.view(s.nextSeq()))
}

// dropParamKey forgets a subscription key with parameters that nothing
// watches or caches any more.
func (tc *typeCache) dropParamKey(key string) {
	name, ps := keying.SplitSubscriptionKey(key)
	e := tc.names[name]
	if ps == "" || e == nil || e.params == nil {
		return
	}
	delete(e.params, key)
	if len(e.params) == 0 {
		e.params = nil
		tc.tidy(name)
		if _, plain := tc.view.Resources[name]; !plain && !tc.up[name] {
			tc.leaveVariantMode(name)
		}
	}
}

// variantInfo lists name's stored variants for /debug/cache, each with the
// keys that select it.
func (tc *typeCache) variantInfo(name string) map[*downstream.Resource][]string {
	out := make(map[*downstream.Resource][]string)
	for _, v := range tc.get(name).variants {
		out[v.res] = nil
	}
	for _, k := range tc.keysOf(name) {
		if r, ok := tc.view.Resources[k]; ok {
			out[r.Root()] = append(out[r.Root()], k)
		}
	}
	return out
}

// constraintsOf returns the canonical form and the encoding of a variant's
// constraints ("" and nil for none).
func constraintsOf(c *discoverypb.DynamicParameterConstraints) (string, []byte, error) {
	if c == nil {
		return "", nil, nil
	}
	b, err := marshalDeterministic(c)
	if err != nil {
		return "", nil, err
	}
	return keying.CanonicalConstraints(c), b, nil
}

// errorKeys returns the keys of name whose parameters match the constraints
// of a TP2 variant's resource error.
func (tc *typeCache) errorKeys(name string, c *discoverypb.DynamicParameterConstraints) []string {
	var out []string
	for _, k := range tc.keysOf(name) {
		if keying.Match(c, tc.paramsOf(name, k)) {
			out = append(out, k)
		}
	}
	return out
}

// variantVersion is a resource's version: derived from its bytes and, for a
// TP2 variant, its canonical constraints (a variant replaced by another with
// the same bytes is a change for its subscribers).
func variantVersion(b []byte, constraints string) string {
	if constraints == "" {
		return downstream.ResourceVersion(b)
	}
	return downstream.ResourceVersion(append(b[:len(b):len(b)], constraints...))
}

// pruneVariants drops the variants of name that a full-state response with
// some replaced: it carries the variants the keys it answers select, so one
// such key's selection that it left out is gone. It is the upstream's word
// only on those keys: a variant another key selects, or none, stays.
func (a *applier) pruneVariants(name string) {
	if !a.fullSotW || a.sent[name] == nil {
		return
	}
	tc, old := a.tc, a.edit.old.Resources
	gone := make(map[string]bool)
	for _, answered := range []bool{true, false} {
		for _, k := range tc.keysOf(name) {
			if sel, ok := old[k]; ok && !a.sent[name][sel.Constraints] && a.answers(name, k) == answered {
				gone[sel.Constraints] = answered // an unanswered key's selection stays
			}
		}
	}
	tc.setVariants(name, slices.DeleteFunc(tc.get(name).variants, func(v variant) bool { return gone[v.res.Constraints] }))
}

// answers reports whether the full-state response answers key k of name: a
// key with parameters (or a plain name) it is known to answer, or the plain
// name of a member of the wildcard set it answers. A plain name the View
// does not hold is no such member: the wildcard's answer says nothing of a
// key its request did not carry.
func (a *applier) answers(name, k string) bool {
	if _, ok := a.u.Keys[k]; ok {
		return true
	}
	r := a.edit.old.Resources[k]
	return k == name && a.u.Complete && a.authority == "" && r != nil && r.InWildcard()
}

// markGone marks each key of name, plain or with parameters, that is
// subscribed upstream and selects no variant absent when the response is the
// upstream's word on it: a key that no remaining variant matches is answered
// as if the resource did not exist (xRFC TP2). A key that selects a variant
// is absent no more.
func (a *applier) markGone(name string) {
	res := a.edit.resources()
	for _, k := range a.tc.keysOf(name) {
		if _, ok := res[k]; ok {
			a.edit.unmarkAbsent(k) // a variant matches again
			continue
		}
		if !a.tc.up[k] || !a.upstreamSaysGone(name, k) {
			continue
		}
		a.edit.markAbsent(k)
		if _, was := a.edit.old.Absent[k]; !was {
			a.edit.change(k)
		}
	}
}

// upstreamSaysGone reports whether the response is the upstream's word that
// key k of name, which selects no variant, does not exist: it deleted the
// name; or, a SotW full state answering k, it sent every variant of name k
// may select; or it removed the variant k selected (Delta
// removed_resource_names, removed_resources of the unconstrained variant, a
// NOT_FOUND variant error); or, Delta, its removed_resources answered the
// plain name, which no variant left selects.
func (a *applier) upstreamSaysGone(name, k string) bool {
	if a.fullSotW {
		return (a.removed[name] || a.sent[name] != nil) && a.answers(name, k)
	}
	if a.removed[name] || k == name && a.plainGone[name] {
		return true
	}
	sel, had := a.edit.old.Resources[k]
	return had && !slices.ContainsFunc(a.tc.get(name).variants, func(v variant) bool { return v.res.Constraints == sel.Constraints })
}
