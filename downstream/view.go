package downstream

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// Resource is one resource as streams see it. Immutable once published.
type Resource struct {
	// Name is the resource's name.
	Name string
	// Spelling is the name as the upstream wrote it when that is not Name
	// (an xdstp name not in canonical form): responses name the resource
	// so, but to a Delta client that named it itself (spelling.go).
	Spelling string
	// Version is derived from the resource's bytes: equal bytes, equal version,
	// on every stream, after restarts and on every replica.
	Version string
	// Any is the serialized google.protobuf.Any holding the upstream's bytes
	// for the resource, untouched.
	Any []byte
	// Authority is the upstream authority the resource came from: "" for the
	// default servers. Wildcard subscriptions select the default authority's
	// resources.
	Authority string
	// Listed: the default servers list the resource in their wildcard
	// answer although its (xdstp) name is another authority's, whose own
	// stream delivered it — so it stays in the wildcard set (InWildcard).
	Listed bool
	// Glob is the xdstp glob collection the resource is a direct member of
	// ("" for legacy names): a stream subscribed to the glob gets it.
	Glob string
	// UpstreamVersion is the version the upstream gave the resource (Delta),
	// sent back upstream as initial_resource_versions after a reconnect.
	UpstreamVersion string
	// Constraints is the canonical form of the variant's TP2 dynamic
	// parameter constraints ("" for none) and ConstraintsWire their
	// encoding, sent with the variant to subscribers that use locators.
	Constraints     string
	ConstraintsWire []byte
	// Key is the resource's key in its View when that is not Name: a TP2
	// subscription key (keying.SubscriptionKey) this variant was selected for.
	Key string
	// TTL is the time to live the upstream gave the resource (xDS TTL; 0:
	// none), passed on to clients that support it.
	TTL time.Duration

	// base is the stored variant a selection (Selected) shares its encodings
	// with; nil for the stored variant itself.
	base *Resource

	encodings // its wrapped forms (encode.go), encoded on first use
	refsState // what it refers to (mbb.go), parsed on first use
}

// key returns the resource's key in its View.
func (r *Resource) key() string {
	if r.Key != "" {
		return r.Key
	}
	return r.Name
}

// InWildcard reports whether a wildcard subscription selects r (when plain):
// the default servers sent it or list it.
func (r *Resource) InWildcard() bool { return r.Authority == "" || r.Listed }

// WithListed returns a copy of the plain resource r listed, or not, in the
// default servers' wildcard answer.
func (r *Resource) WithListed(listed bool) *Resource {
	c := r.WithTTL(r.Version, r.TTL)
	c.Constraints, c.ConstraintsWire, c.Listed = r.Constraints, r.ConstraintsWire, listed
	return c
}

// FromDefaultServers returns a copy of the plain resource r as the default
// servers', which list it: its own authority no longer speaks of it.
func (r *Resource) FromDefaultServers() *Resource {
	c := r.WithTTL(r.Version, r.TTL)
	c.Authority, c.Listed = "", false
	return c
}

// plain reports whether r is keyed by its name: what wildcard and glob
// subscriptions select (selections for TP2 parameters are not).
func (r *Resource) plain() bool { return r.Key == "" || r.Key == r.Name }

// Selected returns r as the variant selected for the subscription key: the
// same resource (and shared encodings) under another key of the View.
func (r *Resource) Selected(key string) *Resource {
	if key == r.Name && r.base == nil {
		return r
	}
	root := r.Root()
	return &Resource{Name: root.Name, Spelling: root.Spelling, Version: root.Version, Any: root.Any, Authority: root.Authority, Listed: root.Listed, Glob: root.Glob,
		UpstreamVersion: root.UpstreamVersion, Constraints: root.Constraints, ConstraintsWire: root.ConstraintsWire,
		TTL: root.TTL, Key: key, base: root}
}

// WithTTL returns a copy of the plain resource r with another TTL and the
// version that goes with it.
func (r *Resource) WithTTL(version string, ttl time.Duration) *Resource {
	return &Resource{Name: r.Name, Spelling: r.Spelling, Version: version, Any: r.Any, Authority: r.Authority, Listed: r.Listed, Glob: r.Glob,
		UpstreamVersion: r.UpstreamVersion, TTL: ttl}
}

// Root returns the stored variant r selects (r itself when it is one), whose
// encodings r shares.
func (r *Resource) Root() *Resource {
	if r.base != nil {
		return r.base
	}
	return r
}

// View is an immutable snapshot of one type's resources, published by the
// Source after every change of that type. Streams hold Views in their queues,
// so a View is never modified after it has been published; only its memo of
// encoded responses grows.
type View struct {
	// TypeURL is the type of every resource in the View.
	TypeURL string
	// Seq increases with every View of this type.
	Seq uint64
	// Resources holds the present resources by name.
	Resources map[string]*Resource
	// Changed holds the names whose version changed since the previous View,
	// removals included.
	Changed map[string]struct{}
	// Absent holds names the upstream said do not exist (never modified once
	// published; may be shared between Views).
	Absent map[string]struct{}
	// Unfound holds what is not found yet: known from the upstream's
	// silence, not its word (never modified once published; may be shared
	// between Views). A name in it was subscribed and the upstream sent
	// nothing of it for upstream.does_not_exist_after; keying.Wildcard in it:
	// the upstream said nothing more after the relay subscribed the wildcard,
	// so the default authority's names the View lacks are not found yet. Only
	// a client that holds nothing of it may be answered from it (Known).
	Unfound map[string]struct{}
	// Withdrawn holds, for an unfound name whose cached copy the relay took
	// for gone (a SotW server's silence on RDS/EDS, the protocol's limit),
	// the version of that copy (never modified once published; may be
	// shared between Views). A client that holds that copy is told it is
	// gone (Withdrew): the relay takes back its own word; one that holds
	// another version, brought from elsewhere, keeps it.
	Withdrawn map[string]string
	// Errors holds TP3 per-resource errors by name (may be shared between
	// Views; never modified once published). Streams that subscribe to such
	// a name get the error, now and when they subscribe later.
	Errors map[string]*ResourceError
	// Complete reports that the upstream answered the wildcard subscription,
	// so the default authority's resources are the full set.
	Complete bool
	// AnsweredGlobs holds the glob collections whose set the upstream
	// answered on their subscription, as Complete does the wildcard: their
	// members in Resources are the full set (never modified once published;
	// may be shared between Views).
	AnsweredGlobs map[string]struct{}
	// Unconfirmed holds the authorities ("" the default servers') whose word
	// in the View no live upstream stream confirms: the upstream is away, or
	// has not answered since the relay reconnected or started from its
	// warm-restart file (never modified once published; may be shared
	// between Views). Clients that hold config from elsewhere are not told
	// that a resource of such an authority is gone (Stale).
	Unconfirmed map[string]bool
	// Unsure holds the cached names and keys whose value no live upstream
	// subscription has confirmed since theirs ended (or since they were
	// loaded from the warm-restart file): the upstream may have a newer one
	// (never modified once published; may be shared between Views).
	// Clients that hold another version from elsewhere are not sent it
	// (Doubtful).
	Unsure map[string]struct{}
	// Received is when the change arrived from upstream.
	Received time.Time
	// Heartbeats holds names whose TTL the upstream refreshed without a
	// change (xDS TTL heartbeats): streams that hold them pass them on.
	Heartbeats map[string]struct{}

	wildOnce sync.Once
	wild     []*Resource // default-authority resources sorted by name
	wildTTL  bool        // one of them has a TTL

	globOnce sync.Once
	globs    map[string][]*Resource // glob collection → its members

	mu    sync.Mutex
	memo  map[string]*body         // guarded by mu: encoded responses by selection key
	named map[namedKey]*namedState // guarded by mu: full states of interned subscriptions
}

// Next returns a new View of the type carrying v's state (resources,
// absences, errors, completeness, staleness, receipt time) with sequence
// number seq and changed names changed, for the Source to adjust before it
// publishes it. v is not modified.
func (v *View) Next(seq uint64, changed map[string]struct{}) *View {
	return &View{TypeURL: v.TypeURL, Seq: seq, Resources: v.Resources, Changed: changed, Absent: v.Absent,
		Unfound: v.Unfound, Withdrawn: v.Withdrawn, Errors: v.Errors, Complete: v.Complete, AnsweredGlobs: v.AnsweredGlobs, Unconfirmed: v.Unconfirmed, Unsure: v.Unsure, Received: v.Received}
}

// GlobAnswered reports whether the View knows the whole set of the glob
// collection glob: the upstream answered it, or the glob does not exist (a
// TP3 data error: its authority is not configured, say). A member missing
// from it is gone.
func (v *View) GlobAnswered(glob string) bool {
	if _, ok := v.AnsweredGlobs[glob]; ok {
		return true
	}
	e, ok := v.Errors[glob]
	return ok && e.dataError()
}

// Stale reports whether the View's word on key (a name, a subscription key,
// a glob collection or the wildcard) is not confirmed by its authority's
// live upstream stream — for a cached copy, the authority whose servers sent
// it (Resource.Authority): the default servers list another authority's
// names too. Another authority's unconfirmed data does not make it so: an
// authority that no longer subscribes the type may stay unconfirmed for
// good.
func (v *View) Stale(key string) bool {
	if len(v.Unconfirmed) == 0 {
		return false
	}
	auth, _ := keying.Authority(key)
	if r, ok := v.Resources[key]; ok {
		auth = r.Authority
	}
	return v.Unconfirmed[auth]
}

// Doubtful reports whether the View's copy of key may be older than the
// upstream's: its authority's word is unconfirmed (Stale), or the key's
// cached value is unsure (Unsure). A client that brought another version of
// it from elsewhere is not sent it: that would be a rollback.
func (v *View) Doubtful(key string) bool {
	_, unsure := v.Unsure[key]
	return unsure || v.Stale(key)
}

// Gone reports whether the View knows that key does not exist upstream: the
// upstream said so (a removal, NOT_FOUND), the stream may not have it
// (PERMISSION_DENIED), or it is a name of the default authority missing from
// the complete wildcard set or from its glob collection's answered set.
// Only for a key not in Resources.
func (v *View) Gone(key string) bool {
	if _, ok := v.Absent[key]; ok {
		return true
	}
	if e, ok := v.Errors[key]; ok {
		return e.dataError()
	}
	if !keying.HasParams(key) && v.GlobAnswered(keying.GlobOf(key)) {
		return true
	}
	auth, _ := keying.Authority(key)
	return v.Complete && auth == "" && !keying.HasParams(key) && !keying.IsGlob(key)
}

// Withdrew reports whether the relay took back its copy of key at version
// (Withdrawn): a client that holds it may be told it is gone.
func (v *View) Withdrew(key, version string) bool {
	w, ok := v.Withdrawn[key]
	return ok && w == version
}

// Known reports whether a client may be answered that there is nothing more
// of key than the View holds: for a name it lacks, that it does not exist;
// for keying.Wildcard, that the wildcard set is whole. The upstream's word
// (Gone, Complete) answers every client. What is only not found yet
// (Unfound) answers a client that holds nothing of key (holds: it may hold
// some, sent here or brought from elsewhere), never one it would tell that
// something it holds is gone.
func (v *View) Known(key string, holds bool) bool {
	if key == keying.Wildcard && v.Complete || key != keying.Wildcard && v.Gone(key) {
		return true
	}
	_, unfound := v.Unfound[key]
	return unfound && !holds
}

// wildcard returns the resources a wildcard subscription selects, sorted.
func (v *View) wildcard() []*Resource {
	v.wildOnce.Do(func() {
		for _, r := range v.Resources {
			if r.InWildcard() && r.plain() {
				v.wild = append(v.wild, r)
				v.wildTTL = v.wildTTL || r.TTL > 0
			}
		}
		slices.SortFunc(v.wild, func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) })
	})
	return v.wild
}

// wildcardTTL reports whether a resource of the wildcard set has a TTL.
func (v *View) wildcardTTL() bool {
	v.wildcard()
	return v.wildTTL
}

// members returns the resources of the glob collection glob (shared,
// read-only). The View indexes its globs once, not once per stream.
func (v *View) members(glob string) []*Resource {
	v.globOnce.Do(func() {
		for _, r := range v.Resources {
			if r.Glob != "" && r.plain() {
				if v.globs == nil {
					v.globs = make(map[string][]*Resource)
				}
				v.globs[r.Glob] = append(v.globs[r.Glob], r)
			}
		}
	})
	return v.globs[glob]
}

// namedKey identifies a full state of an interned subscription: the set,
// and whether resources carry their TTLs.
type namedKey struct {
	set *nameSet
	ttl bool
}

// namedState is what a View holds for the streams that subscribe to one
// interned set of names, without a wildcard, globs, locators or denied
// names — proxyless gRPC's CDS by name: the full-state response and what
// deciding to send it needs. Every such stream shares it, so a change costs
// each of them a lookup, not a pass over its names.
type namedState struct {
	body    *body
	present int    // resources in body
	errors  int    // TP3 errors in body
	gone    bool   // a client that holds none of the names may be told one does not exist (Known)
	key     string // the body's memo key
	sel     []*Resource
	errs    []*ResourceError
	// wild: the response carries the wildcard set of this View too.
	wild *View
}

// pick returns the resources of the selection, sorted.
func (ns *namedState) pick() []*Resource {
	if ns.wild == nil {
		return ns.sel
	}
	if len(ns.sel) == 0 {
		return ns.wild.wildcard()
	}
	all := append(slices.Clone(ns.wild.wildcard()), ns.sel...)
	slices.SortFunc(all, byName)
	return all
}

// namedFull returns the full state of v for set. Called by streams that
// hold set with no denied names, no globs and no locators.
func (v *View) namedFull(set *nameSet, ttl bool) *namedState {
	k := namedKey{set, ttl}
	v.mu.Lock()
	ns, ok := v.named[k]
	v.mu.Unlock()
	if ok {
		return ns
	}
	ns = &namedState{}
	for n := range set.names {
		if r, ok := v.Resources[n]; ok {
			ns.sel = append(ns.sel, r)
		} else if e, ok := v.Errors[n]; ok {
			ns.errs = append(ns.errs, e)
		} else if v.Known(n, false) {
			ns.gone = true
		}
	}
	slices.SortFunc(ns.sel, byName)
	sortErrors(ns.errs)
	ns.present, ns.errors = len(ns.sel), len(ns.errs)
	ns.key = "\x00set:" + strconv.FormatUint(set.id, 10)
	w := wrap{ttl: ttl}
	if ttl {
		ns.key += ":ttl"
	}
	ns.body = v.sotw(ns.key, ns.pick, ns.errs, w)
	v.mu.Lock()
	defer v.mu.Unlock()
	if prev, ok := v.named[k]; ok {
		return prev // built twice at once: keep one
	}
	if v.named == nil {
		v.named = make(map[namedKey]*namedState)
	}
	v.named[k] = ns
	return ns
}

// body is an encoded response without its per-stream nonce, shared by every
// stream that sends the same selection of the same View.
type body struct {
	bytes   []byte
	version string
	count   int
	// keys are the keys of the resources it carries (read-only): what a
	// client holds after a full-state response.
	keys map[string]struct{}

	mu      sync.Mutex
	coverOf weak.Pointer[body] // guarded by mu: the last body covers was asked about (weak: bodies never chain)
	covered bool               // guarded by mu: and its answer
}

// has reports whether b carries key.
func (b *body) has(key string) bool {
	_, in := b.keys[key]
	return in
}

// covers reports whether b carries every key of prev (nil: nothing): a
// client that holds prev loses nothing with b. The answer for the last prev
// asked is kept, since the streams of a fleet mostly hold the same body.
func (b *body) covers(prev *body) bool {
	if prev == nil {
		return true
	}
	wp := weak.Make(prev)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.coverOf == wp {
		return b.covered
	}
	ok := true
	for k := range prev.keys {
		if _, in := b.keys[k]; !in {
			ok = false
			break
		}
	}
	b.coverOf, b.covered = wp, ok
	return ok
}

// sotw returns the SotW response body for the selection identified by key,
// encoding it with pick the first time.
// w tells how to wrap the resources (TP2 names and constraints, TTLs); key
// must tell it too (wrap.mark).
func (v *View) sotw(key string, pick func() []*Resource, errs []*ResourceError, w wrap) *body {
	if len(errs) > 0 {
		key += errorKey(errs)
	}
	return v.memoized(key, func() *body { return encodeSotW(v.TypeURL, pick(), errs, w) })
}

// errorKey extends a memo key with the errors a response carries.
func errorKey(errs []*ResourceError) string {
	var sb strings.Builder
	sb.WriteString("\x00!")
	for _, e := range errs {
		sb.WriteString(e.Name)
		sb.WriteByte(0)
	}
	return sb.String()
}

// memoized returns the body memoized under key, encoding it the first time.
func (v *View) memoized(key string, encode func() *body) *body {
	v.mu.Lock()
	defer v.mu.Unlock()
	if b, ok := v.memo[key]; ok {
		return b
	}
	b := encode()
	if v.memo == nil {
		v.memo = make(map[string]*body)
	}
	v.memo[key] = b
	return b
}

// setVersion derives a response version from the resources and errors it
// carries.
func setVersion(rs []*Resource, errs []*ResourceError) string {
	h := sha256.New()
	for _, r := range rs {
		h.Write([]byte(r.key()))
		h.Write([]byte{0})
		h.Write([]byte(r.Version))
		h.Write([]byte{0})
	}
	for _, e := range errs {
		h.Write([]byte{1})
		h.Write(e.bytes())
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// ResourceVersion derives a resource's version from its serialized bytes.
func ResourceVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// DiscoveryResponse field numbers (envoy.service.discovery.v3).
const (
	sotwVersionInfo = 1
	sotwResources   = 2
	sotwTypeURL     = 4
	sotwNonce       = 5
)

// encodeSotW encodes a DiscoveryResponse without its nonce; the nonce is
// appended per stream (protobuf allows fields in any order).
func encodeSotW(typeURL string, rs []*Resource, errs []*ResourceError, w wrap) *body {
	version := setVersion(rs, errs)
	// anyOf is what the response carries for r: its Any, or wrapped in a
	// Resource with its TP2 name and constraints or its TTL.
	anyOf := func(r *Resource) []byte {
		if f := w.formOf(r); f != 0 {
			return r.wrapper(f | formAny)
		}
		return r.Any
	}
	n := protowire.SizeTag(sotwVersionInfo) + protowire.SizeBytes(len(version)) +
		protowire.SizeTag(sotwTypeURL) + protowire.SizeBytes(len(typeURL))
	for _, r := range rs {
		n += protowire.SizeTag(sotwResources) + protowire.SizeBytes(len(anyOf(r)))
	}
	b := make([]byte, 0, n)
	b = protowire.AppendTag(b, sotwVersionInfo, protowire.BytesType)
	b = protowire.AppendString(b, version)
	for _, r := range rs {
		b = protowire.AppendTag(b, sotwResources, protowire.BytesType)
		b = protowire.AppendBytes(b, anyOf(r))
	}
	b = protowire.AppendTag(b, sotwTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	b = appendErrors(b, sotwResourceErrors, errs)
	keys := make(map[string]struct{}, len(rs))
	for _, r := range rs {
		keys[r.key()] = struct{}{}
	}
	return &body{bytes: b, version: version, count: len(rs), keys: keys}
}
