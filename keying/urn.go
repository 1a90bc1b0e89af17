package keying

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Errors returned by ParseURN, ParseURL and Canonical. Every parse error wraps
// exactly one of them; test with errors.Is.
var (
	// ErrNotXDSTP: the name does not start with "xdstp:"; it is a legacy name.
	ErrNotXDSTP = errors.New("keying: not an xdstp name")
	// ErrMalformed: the name starts with "xdstp:" but is not a valid URI of the
	// TP1 shape.
	ErrMalformed = errors.New("keying: malformed xdstp name")
	// ErrNotURN: a valid xdstp:// URL that is not a resource name, because it
	// carries directives (#alt=, #entry=) or, for ParseURN, is a glob.
	ErrNotURN = errors.New("keying: xdstp URL is not a resource name")
)

const (
	schemePrefix = "xdstp:"
	urnPrefix    = "xdstp://"
	// maxAltDepth bounds the nesting of #alt= locators ParseURL follows.
	maxAltDepth = 8
)

// URN is a parsed xdstp:// resource name (xRFC TP1):
//
//	xdstp://{authority}/{resource type}/{id}?{context params}
//
// All fields hold decoded text (no percent-escapes). The zero value is not a
// valid URN: ResourceType must be non-empty. URNs from ParseURN and ParseURL
// satisfy ParseURN(u.String()) == u (ParseURL for globs).
type URN struct {
	// Authority names the control plane that owns the resource; may be empty
	// ("xdstp:///type/id").
	Authority string
	// ResourceType is the resource's proto type without the type URL host,
	// e.g. "envoy.config.listener.v3.Listener". Never empty.
	ResourceType string
	// ID is the opaque rest of the path; it may be empty and may contain '/'.
	// An ID of "*" or ending in "/*" makes the URN a glob collection.
	ID string
	// ContextParams are the query parameters; nil when there are none.
	ContextParams map[string]string
}

// Directive is one processing directive in the fragment of an xdstp:// URL.
// Exactly one field is set.
type Directive struct {
	// Alt is a fallback locator ("#alt=xdstp://...").
	Alt *URL
	// Entry names an inlined entry of a list collection ("#entry=name").
	Entry string
}

// URL is an xdstp:// resource locator: a URN, possibly a glob, followed by
// processing directives. URLs are not cache keys.
type URL struct {
	URN
	// Directives in the order given; nil when there are none.
	Directives []Directive
}

// IsXDSTP reports whether name uses the xdstp: scheme (envoy's test: the
// prefix "xdstp:"); every other name is a legacy, opaque name.
func IsXDSTP(name string) bool { return strings.HasPrefix(name, schemePrefix) }

// ParseURN parses an xdstp:// resource name. The rules, derived from envoy's
// XdsResourceIdentifier and grpc-go's xdsresource.ParseName:
//
//   - The scheme is exactly "xdstp://" (lower case); other names give ErrNotXDSTP.
//   - The authority runs to the first '/', '?' or '#'; it may be empty.
//   - A resource type is required ("xdstp://auth" and "xdstp://auth//id" are
//     malformed). The ID is everything after the type's '/', slashes included,
//     and may be empty: "xdstp://a/T", "xdstp://a/T/" and "xdstp://a/T/?" are
//     the same URN.
//   - Context params: "&"-separated; empty segments and a bare '?' are
//     ignored; "k" alone means k=""; "=v" is the empty key. For a duplicated
//     key the first value wins (as in both references). '+' is a literal
//     plus, not a space (RFC 3986, as envoy).
//   - Each component is percent-decoded; "%" not followed by two hex digits
//     is ErrMalformed (grpc-go's url.Parse also rejects it).
//   - A fragment (directives) or a glob ID gives ErrNotURN: TP1 URNs carry
//     neither. Use ParseURL for those.
func ParseURN(s string) (URN, error) {
	u, err := ParseURL(s)
	if err != nil {
		return URN{}, err
	}
	if len(u.Directives) > 0 {
		return URN{}, fmt.Errorf("%w: %q has directives", ErrNotURN, s)
	}
	if u.IsGlob() {
		return URN{}, fmt.Errorf("%w: %q is a glob collection", ErrNotURN, s)
	}
	return u.URN, nil
}

// ParseURL parses an xdstp:// locator: a URN as ParseURN reads it, which may
// also be a glob, optionally followed by "#" and comma-separated directives
// "alt=URL" (itself an xdstp:// URL, percent-encoded) and "entry=NAME". An
// empty fragment, an empty directive, an unknown directive or an empty entry
// name is ErrMalformed. Only the xdstp: scheme is supported (envoy also knows
// http: and file: locators, which a relay never sees).
func ParseURL(s string) (URL, error) { return parseURL(s, 0) }

func parseURL(s string, depth int) (URL, error) {
	if !IsXDSTP(s) {
		return URL{}, fmt.Errorf("%w: %q", ErrNotXDSTP, s)
	}
	rest, ok := strings.CutPrefix(s, urnPrefix)
	if !ok {
		return URL{}, malformed(s, `missing "//" after "xdstp:"`)
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	rest, query, _ := strings.Cut(rest, "?")
	rawAuth, path, ok := strings.Cut(rest, "/")
	if !ok {
		return URL{}, malformed(s, "missing resource type")
	}
	rawType, rawID, _ := strings.Cut(path, "/")
	if rawType == "" {
		return URL{}, malformed(s, "missing resource type")
	}
	var u URL
	var err error
	if u.Authority, err = unescape(rawAuth); err != nil {
		return URL{}, malformed(s, "authority: "+err.Error())
	}
	if u.ResourceType, err = unescape(rawType); err != nil {
		return URL{}, malformed(s, "resource type: "+err.Error())
	}
	if u.ID, err = unescape(rawID); err != nil {
		return URL{}, malformed(s, "id: "+err.Error())
	}
	if u.ContextParams, err = parseQuery(query); err != nil {
		return URL{}, malformed(s, "context params: "+err.Error())
	}
	if hasFrag {
		if u.Directives, err = parseDirectives(frag, depth); err != nil {
			return URL{}, malformed(s, "directives: "+err.Error())
		}
	}
	return u, nil
}

func malformed(s, why string) error {
	return fmt.Errorf("%w %q: %s", ErrMalformed, s, why)
}

func parseQuery(q string) (map[string]string, error) {
	var m map[string]string
	for q != "" {
		var seg string
		seg, q, _ = strings.Cut(q, "&")
		if seg == "" {
			continue
		}
		rk, rv, _ := strings.Cut(seg, "=")
		k, err := unescape(rk)
		if err != nil {
			return nil, err
		}
		v, err := unescape(rv)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = make(map[string]string, 1+strings.Count(q, "&"))
		}
		if _, dup := m[k]; !dup { // first value wins
			m[k] = v
		}
	}
	return m, nil
}

func parseDirectives(frag string, depth int) ([]Directive, error) {
	ds := make([]Directive, 0, 1+strings.Count(frag, ","))
	for part := range strings.SplitSeq(frag, ",") {
		switch {
		case strings.HasPrefix(part, "alt="):
			if depth >= maxAltDepth {
				return nil, fmt.Errorf("alt nested deeper than %d", maxAltDepth)
			}
			raw, err := unescape(part[len("alt="):])
			if err != nil {
				return nil, err
			}
			alt, err := parseURL(raw, depth+1)
			if err != nil {
				return nil, fmt.Errorf("alt: %w", err)
			}
			ds = append(ds, Directive{Alt: &alt})
		case strings.HasPrefix(part, "entry="):
			e, err := unescape(part[len("entry="):])
			if err != nil {
				return nil, err
			}
			if e == "" {
				return nil, errors.New("empty entry name")
			}
			ds = append(ds, Directive{Entry: e})
		default:
			return nil, fmt.Errorf("unknown directive %q", part)
		}
	}
	return ds, nil
}

// String formats u in canonical form: context params sorted by key (byte
// order of the decoded keys), no '?' without params, no '/' before an empty
// ID, and percent-escapes (upper-case hex) only for the characters that would
// otherwise end or split their component:
//
//	authority, type:  % / ? #
//	id:               % ? #        ('/' stays literal: the id is a path)
//	param key:        % # & =
//	param value:      % # &
//
// Everything else, including ':' '@' '[' ']' '+' ' ' and non-ASCII bytes, is
// written as is, so a name that is already canonical is never rewritten.
// (envoy's encoder escapes a few more characters; both forms parse to the
// same URN.)
func (u URN) String() string {
	var b strings.Builder
	b.Grow(len(urnPrefix) + len(u.Authority) + len(u.ResourceType) + len(u.ID) + 2 + 16*len(u.ContextParams))
	u.write(&b)
	return b.String()
}

func (u URN) write(b *strings.Builder) {
	b.WriteString(urnPrefix)
	writeEscaped(b, u.Authority, &authoritySet)
	b.WriteByte('/')
	writeEscaped(b, u.ResourceType, &authoritySet)
	if u.ID != "" {
		b.WriteByte('/')
		writeEscaped(b, u.ID, &idSet)
	}
	if len(u.ContextParams) == 0 {
		return
	}
	var buf [8]string // keeps the usual few keys off the heap
	keys := buf[:0]
	for k := range u.ContextParams {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sep := byte('?')
	for _, k := range keys {
		b.WriteByte(sep)
		sep = '&'
		writeEscaped(b, k, &keySet)
		b.WriteByte('=')
		writeEscaped(b, u.ContextParams[k], &valueSet)
	}
}

// String formats l canonically: its URN as URN.String does, then
// "#" and its directives, comma-separated in their order, each value
// escaping % # and ','.
func (l URL) String() string {
	var b strings.Builder
	l.URN.write(&b)
	for i, d := range l.Directives {
		if i == 0 {
			b.WriteByte('#')
		} else {
			b.WriteByte(',')
		}
		if d.Alt != nil {
			b.WriteString("alt=")
			writeEscaped(&b, d.Alt.String(), &directiveSet)
		} else {
			b.WriteString("entry=")
			writeEscaped(&b, d.Entry, &directiveSet)
		}
	}
	return b.String()
}

// Equal reports whether u and o name the same resource: every component
// equal, context params compared as a set (a nil and an empty map are equal).
func (u URN) Equal(o URN) bool {
	return u.Authority == o.Authority && u.ResourceType == o.ResourceType &&
		u.ID == o.ID && maps.Equal(u.ContextParams, o.ContextParams)
}

// IsGlob reports whether u is a glob collection: its ID is "*" or ends in "/*"
// (TP1 "glob collections"; decoded, so ".../%2A" is a glob too).
func (u URN) IsGlob() bool { return u.ID == "*" || strings.HasSuffix(u.ID, "/*") }

// Matches reports whether the glob u covers the resource name: same authority
// and type, name's ID a direct child of the glob's directory ("foo/*" covers
// "foo/bar" but not "foo/bar/baz" nor "foo"; "*" covers IDs without '/'), and
// context params equal to the glob's as a set (TP1: a glob's params must match
// in responses). This is how envoy resolves a name to a glob watch. It is
// false when u is not a glob or name is one.
func (u URN) Matches(name URN) bool {
	if !u.IsGlob() || name.IsGlob() ||
		u.Authority != name.Authority || u.ResourceType != name.ResourceType {
		return false
	}
	rest, ok := strings.CutPrefix(name.ID, u.ID[:len(u.ID)-1])
	return ok && !strings.Contains(rest, "/") && maps.Equal(u.ContextParams, name.ContextParams)
}

// Glob returns the glob collection whose direct member u is: u with the last
// path segment of its ID replaced by "*" ("foo/bar" → "foo/*", "bar" → "*").
// For every non-glob u, u.Glob().Matches(u) is true; a relay can index glob
// subscriptions by u.Glob().String() and find a resource's glob in one lookup.
func (u URN) Glob() URN {
	g := u
	if i := strings.LastIndexByte(u.ID, '/'); i >= 0 {
		g.ID = u.ID[:i+1] + "*"
	} else {
		g.ID = "*"
	}
	return g
}

// IsGlob reports whether name is an xdstp:// glob collection URL. It is false
// for legacy names, including the legacy wildcard "*", and for names that do
// not parse.
func IsGlob(name string) bool {
	// Without escapes or directives a glob's text ends in "/*", or has "/*?"
	// before its context params: most names are answered without parsing.
	if !IsXDSTP(name) || !strings.HasSuffix(name, "/*") && !strings.Contains(name, "/*?") && !strings.ContainsAny(name, "%#") {
		return false
	}
	u, err := ParseURL(name)
	return err == nil && u.IsGlob()
}

// Canonical returns the cache-key form of a subscribed name: a legacy name
// unchanged, an xdstp:// URN or glob as URN.String formats it. Names using the
// xdstp: scheme that do not parse, or that carry directives (a locator a
// client must resolve itself), are errors. Canonical is idempotent, and a name
// that is already canonical comes back as the same string without allocating.
func Canonical(name string) (string, error) {
	if !IsXDSTP(name) || isCanonical(name) {
		return name, nil
	}
	u, err := ParseURL(name)
	if err != nil {
		return "", err
	}
	if len(u.Directives) > 0 {
		return "", fmt.Errorf("%w: %q has directives", ErrNotURN, name)
	}
	return u.URN.String(), nil
}

// isCanonical reports, without allocating, whether the xdstp name s is already
// in the form URN.String produces. It may say false for a canonical name (any
// '%' takes the slow path); it never says true for a non-canonical one.
func isCanonical(s string) bool {
	rest, ok := strings.CutPrefix(s, urnPrefix)
	if !ok || strings.ContainsAny(rest, "%#") {
		return false
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	_, path, ok = strings.Cut(path, "/")
	if !ok {
		return false
	}
	typ, id, hasID := strings.Cut(path, "/")
	if typ == "" || (hasID && id == "") || (hasQuery && query == "") {
		return false
	}
	prev, first := "", true
	for query != "" {
		var seg string
		seg, query, hasQuery = strings.Cut(query, "&")
		k, _, hasEq := strings.Cut(seg, "=")
		if !hasEq || (!first && k <= prev) || (hasQuery && query == "") {
			return false
		}
		prev, first = k, false
	}
	return true
}

// escapeSet is a set of ASCII bytes to percent-escape.
type escapeSet [2]uint64

func newEscapeSet(chars string) escapeSet {
	var s escapeSet
	for i := 0; i < len(chars); i++ {
		c := chars[i]
		s[c/64] |= 1 << (c % 64)
	}
	return s
}

func (s *escapeSet) has(c byte) bool { return c < 128 && s[c/64]&(1<<(c%64)) != 0 }

var (
	authoritySet = newEscapeSet("%/?#")
	idSet        = newEscapeSet("%?#")
	keySet       = newEscapeSet("%#&=")
	valueSet     = newEscapeSet("%#&")
	directiveSet = newEscapeSet("%#,")
)

const upperHex = "0123456789ABCDEF"

func writeEscaped(b *strings.Builder, s string, set *escapeSet) {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; set.has(c) {
			b.WriteString(s[start:i])
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
			start = i + 1
		}
	}
	b.WriteString(s[start:])
}

// unescape decodes every %XX in s (either hex case); a '%' not followed by two
// hex digits is an error.
func unescape(s string) (string, error) {
	n := strings.IndexByte(s, '%')
	if n < 0 {
		return s, nil
	}
	buf := make([]byte, 0, len(s))
	buf = append(buf, s[:n]...)
	for i := n; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			buf = append(buf, c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			end := min(i+3, len(s))
			return "", fmt.Errorf("bad percent-escape %q", s[i:end])
		}
		buf = append(buf, unhex(s[i+1])<<4|unhex(s[i+2]))
		i += 2
	}
	return string(buf), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}
