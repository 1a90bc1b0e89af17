package keying

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// This file implements xRFC TP2 dynamic-parameter constraints as envoy's
// discovery.proto defines them (where the xRFC text differs, the proto wins):
//
//	DynamicParameterConstraints = oneof {
//	    constraint:      SingleConstraint{key, oneof {value: string, exists: Exists{}}}
//	    or_constraints:  ConstraintList{constraints}
//	    and_constraints: ConstraintList{constraints}
//	    not_constraints: DynamicParameterConstraints
//	}
//
// The proto's Exists is an empty message: it only says "the key is present".
// "The key is absent" (the default for clients that do not send a new key yet,
// TP2 "Adding a New Key on the Server First") is not_constraints around it.

// ErrMalformedConstraints is wrapped by every error of ParseConstraints and
// ParseParams; test with errors.Is.
var ErrMalformedConstraints = errors.New("keying: malformed constraints")

// maxConstraintDepth bounds the nesting ParseConstraints accepts. It equals
// protobuf-go's default unmarshal recursion limit, so the canonical form of
// every tree received from the wire parses back.
const maxConstraintDepth = 10000

// Characters escaped (as %XX, upper-case hex) in the canonical constraint
// form: those that would end or split the key or value.
var (
	constraintKeySet   = newEscapeSet("%(),=")
	constraintValueSet = newEscapeSet("%(),")
)

// Match reports whether params (a subscriber's dynamic parameters,
// ResourceLocator.dynamic_parameters) satisfy the constraints c of a resource
// variant (Resource.resource_name.dynamic_parameter_constraints). The rules:
//
//   - constraint{key, value: v}: params has key and its value is exactly v.
//   - constraint{key, exists: {}}: params has key, with any value ("" too).
//   - constraint with neither value nor exists (or a nil SingleConstraint):
//     matches nothing. This is what a matcher added to the proto later looks
//     like to this code, and a relay must not hand a variant it cannot judge
//     to every client (fail closed; under not_constraints it then matches
//     everything — boolean logic cannot fail closed through a negation).
//   - and_constraints: every member matches; an empty (or nil) list matches.
//   - or_constraints: some member matches; an empty (or nil) list matches
//     nothing (the identities of AND and OR, so that flattening is sound).
//   - not_constraints: the member does not match.
//   - A nil DynamicParameterConstraints, or one with no type set, anywhere in
//     the tree, is "no constraint" and matches everything (TP2: a variant
//     without constraints is sent to all clients).
//
// Keys the constraints do not mention never block a match (TP2
// "Unconstrained Parameters"). A client that sends no parameters at all
// matches only trees that need no key present.
//
// Match does not allocate and is safe for concurrent use (it only reads c and
// params).
func Match(c *discoverypb.DynamicParameterConstraints, params map[string]string) bool {
	switch t := c.GetType().(type) {
	case *discoverypb.DynamicParameterConstraints_Constraint:
		sc := t.Constraint
		v, present := params[sc.GetKey()]
		switch ct := sc.GetConstraintType().(type) {
		case *discoverypb.DynamicParameterConstraints_SingleConstraint_Value:
			return present && v == ct.Value
		case *discoverypb.DynamicParameterConstraints_SingleConstraint_Exists_:
			return present
		default: // no matcher set: fail closed
			return false
		}
	case *discoverypb.DynamicParameterConstraints_AndConstraints:
		for _, m := range t.AndConstraints.GetConstraints() {
			if !Match(m, params) {
				return false
			}
		}
		return true
	case *discoverypb.DynamicParameterConstraints_OrConstraints:
		for _, m := range t.OrConstraints.GetConstraints() {
			if Match(m, params) {
				return true
			}
		}
		return false
	case *discoverypb.DynamicParameterConstraints_NotConstraints:
		return !Match(t.NotConstraints, params)
	default: // nil or no type: no constraint
		return true
	}
}

// CanonicalConstraints returns the canonical text form of c, used as
// Key.Constraints: "" when c matches everything (nil, empty, or a tree that
// reduces to "true"). Two trees with the same canonical form match exactly
// the same parameter sets. The form is
//
//	key=value                 a value constraint
//	exists(key)               an exists constraint
//	not(X)  and(X,Y,...)  or(X,Y,...)
//	or()                      matches nothing
//
// with '%' '(' ')' ',' and, in keys, '=' percent-escaped (upper-case hex);
// every other byte is written as is. Example:
//
//	and(env=prod,not(exists(version)))
//
// The tree is normalised bottom-up before it is written:
//
//   - nested and-in-and and or-in-or are flattened;
//   - members are sorted by their canonical form and duplicates dropped;
//   - a list with one member is that member; not(not(X)) is X;
//   - constants fold: an empty node or an empty and() is "true", an empty or()
//     and a single constraint without a matcher are "false"; "true" members
//     leave an and(), "false" ones leave an or(), and an and() with a "false"
//     member (an or() with a "true" one) is "false" ("true").
//
// This is a normal form under those rules, not a full boolean minimisation:
// or(a=1,and(a=1,b=2)) and a=1 match the same parameters but stay distinct.
// ParseConstraints reads the form back, and CanonicalConstraints of the result
// is the same string. The cost is O(depth × size) of the tree. It is safe for
// concurrent use.
func CanonicalConstraints(c *discoverypb.DynamicParameterConstraints) string {
	return normalize(c).canonical()
}

// ParseConstraints parses the text form that CanonicalConstraints writes and
// returns the constraints, nil for "". It also accepts forms that are not
// canonical (members in any order, nested lists, and() / or() with zero or
// one member, redundant percent-escapes in either hex case), so the form can
// be written by hand in tests and config. The tree it returns mirrors the
// text: and(...) becomes and_constraints, k=v a value constraint, and so on.
// Errors wrap ErrMalformedConstraints.
func ParseConstraints(s string) (*discoverypb.DynamicParameterConstraints, error) {
	if s == "" {
		return nil, nil
	}
	p := constraintParser{s: s}
	c, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if p.i != len(s) {
		return nil, p.errorf("unexpected %q", s[p.i])
	}
	return c, nil
}

// Variant is one variant of a resource as Select sees it.
type Variant struct {
	// Constraints of the variant; nil matches every subscriber.
	Constraints *discoverypb.DynamicParameterConstraints
	// Key identifies the variant to the caller, typically its
	// Key.Constraints. Select uses it only as the last tie-break.
	Key string
}

// Select returns the variant whose constraints match params (a subscriber's
// dynamic parameters), and ok=false when none does. When several match, TP2
// leaves the behaviour undefined ("Matching Ambiguity"); Select then reports
// ambiguous=true (the caller should log it) and picks deterministically,
// independent of the order of variants:
//
//  1. the most specific variant: the most single constraints (value and
//     exists, counted in the canonical form, so duplicates count once);
//  2. then the smallest CanonicalConstraints string;
//  3. then the smallest Key.
//
// Rule 1 serves the TP2 case of a server adding a key before all clients send
// it: {env=prod, version=v1} matches both "env=prod" and
// "and(env=prod,version=v1)" and gets the latter. Select allocates only when
// several variants match. It is safe for concurrent use.
func Select(variants []Variant, params map[string]string) (best Variant, ambiguous bool, ok bool) {
	first, n := -1, 0
	for i := range variants {
		if Match(variants[i].Constraints, params) {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	switch n {
	case 0:
		return Variant{}, false, false
	case 1:
		return variants[first], false, true
	}
	var bestNode *cnode
	for i := first; i < len(variants); i++ {
		v := variants[i]
		if !Match(v.Constraints, params) {
			continue
		}
		nd := normalize(v.Constraints)
		if bestNode == nil || moreSpecific(nd, v.Key, bestNode, best.Key) {
			best, bestNode = v, nd
		}
	}
	return best, true, true
}

// moreSpecific reports whether variant (a, ak) wins over (b, bk) under the
// rules of Select.
func moreSpecific(a *cnode, ak string, b *cnode, bk string) bool {
	if a.leaves != b.leaves {
		return a.leaves > b.leaves
	}
	if as, bs := a.canonical(), b.canonical(); as != bs {
		return as < bs
	}
	return ak < bk
}

// CanonicalParams returns the canonical form of a subscriber's dynamic
// parameters, for subscription keys: "k=v" pairs sorted by key, joined by
// '&', with '%' '#' '&' and, in keys, '=' percent-escaped — the form of a
// URN's context params. nil and empty maps give "". ParseParams reads it back.
func CanonicalParams(params map[string]string) string {
	if len(params) == 0 {
		return ""
	}
	var buf [8]string // keeps the usual few keys off the heap
	keys := buf[:0]
	size := 0
	for k, v := range params {
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		writeEscaped(&b, k, &keySet)
		b.WriteByte('=')
		writeEscaped(&b, params[k], &valueSet)
	}
	return b.String()
}

// ParseParams parses the form CanonicalParams writes; "" gives nil. As for a
// URN's context params, empty segments are ignored, "k" alone means k="", and
// for a duplicated key the first value wins. Errors (a bad percent-escape)
// wrap ErrMalformedConstraints.
func ParseParams(s string) (map[string]string, error) {
	m, err := parseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("%w: params %q: %w", ErrMalformedConstraints, s, err)
	}
	return m, nil
}

// cop is the operator of a normalised constraint node.
type cop uint8

const (
	opTrue cop = iota
	opFalse
	opValue
	opExists
	opAnd
	opOr
	opNot
)

// cnode is a normalised constraint tree node (see CanonicalConstraints).
type cnode struct {
	op     cop
	key    string   // opValue, opExists
	val    string   // opValue
	kids   []*cnode // opAnd, opOr (two or more, sorted, distinct); opNot (one)
	str    string   // canonical form; empty for opTrue and opFalse
	leaves int      // number of value and exists constraints
}

func constNode(v bool) *cnode {
	if v {
		return &cnode{op: opTrue}
	}
	return &cnode{op: opFalse}
}

// canonical is the node's canonical form, with "true" written as "".
func (n *cnode) canonical() string {
	if n.op == opFalse {
		return "or()"
	}
	return n.str
}

// normalize returns the normal form of c. It never changes c.
func normalize(c *discoverypb.DynamicParameterConstraints) *cnode {
	switch t := c.GetType().(type) {
	case *discoverypb.DynamicParameterConstraints_Constraint:
		sc := t.Constraint
		key := escapeString(sc.GetKey(), &constraintKeySet)
		switch ct := sc.GetConstraintType().(type) {
		case *discoverypb.DynamicParameterConstraints_SingleConstraint_Value:
			return &cnode{op: opValue, key: sc.GetKey(), val: ct.Value, leaves: 1,
				str: key + "=" + escapeString(ct.Value, &constraintValueSet)}
		case *discoverypb.DynamicParameterConstraints_SingleConstraint_Exists_:
			return &cnode{op: opExists, key: sc.GetKey(), leaves: 1, str: "exists(" + key + ")"}
		default:
			return constNode(false)
		}
	case *discoverypb.DynamicParameterConstraints_AndConstraints:
		return normalizeList(opAnd, t.AndConstraints.GetConstraints())
	case *discoverypb.DynamicParameterConstraints_OrConstraints:
		return normalizeList(opOr, t.OrConstraints.GetConstraints())
	case *discoverypb.DynamicParameterConstraints_NotConstraints:
		k := normalize(t.NotConstraints)
		switch k.op {
		case opTrue, opFalse:
			return constNode(k.op == opFalse)
		case opNot:
			return k.kids[0]
		}
		return &cnode{op: opNot, kids: []*cnode{k}, leaves: k.leaves, str: "not(" + k.str + ")"}
	default:
		return constNode(true)
	}
}

// normalizeList normalises an and (op == opAnd) or or (opOr) list.
func normalizeList(op cop, members []*discoverypb.DynamicParameterConstraints) *cnode {
	// identity: the constant a member may be dropped for; absorbing: the
	// constant that decides the whole list.
	identity, absorbing := opTrue, opFalse
	if op == opOr {
		identity, absorbing = opFalse, opTrue
	}
	kids := make([]*cnode, 0, len(members))
	for _, m := range members {
		k := normalize(m)
		switch k.op {
		case identity:
		case absorbing:
			return k
		case op:
			kids = append(kids, k.kids...) // flatten and-in-and, or-in-or
		default:
			kids = append(kids, k)
		}
	}
	slices.SortFunc(kids, func(a, b *cnode) int { return strings.Compare(a.str, b.str) })
	kids = slices.CompactFunc(kids, func(a, b *cnode) bool { return a.str == b.str })
	switch len(kids) {
	case 0:
		return constNode(op == opAnd)
	case 1:
		return kids[0]
	}
	name := "and("
	if op == opOr {
		name = "or("
	}
	size, leaves := len(name)+len(kids), 0
	for _, k := range kids {
		size += len(k.str)
		leaves += k.leaves
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(name)
	for i, k := range kids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k.str)
	}
	b.WriteByte(')')
	return &cnode{op: op, kids: kids, leaves: leaves, str: b.String()}
}

// escapeString percent-escapes the bytes of s in set; it returns s itself
// when there are none.
func escapeString(s string, set *escapeSet) string {
	for i := 0; i < len(s); i++ {
		if set.has(s[i]) {
			var b strings.Builder
			b.Grow(len(s) + 8)
			writeEscaped(&b, s, set)
			return b.String()
		}
	}
	return s
}

// constraintParser is a recursive-descent parser of the canonical form.
type constraintParser struct {
	s string
	i int // next byte to read
}

func (p *constraintParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w %q at offset %d: %s", ErrMalformedConstraints, p.s, p.i, fmt.Sprintf(format, args...))
}

// token reads up to the next byte in stop (or the end) and returns it raw.
func (p *constraintParser) token(stop string) string {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte(stop, p.s[p.i]) < 0 {
		p.i++
	}
	return p.s[start:p.i]
}

// next reports whether the next byte is c and, if so, consumes it.
func (p *constraintParser) next(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *constraintParser) unescape(raw string) (string, error) {
	s, err := unescape(raw)
	if err != nil {
		return "", p.errorf("%v", err)
	}
	return s, nil
}

func (p *constraintParser) expr(depth int) (*discoverypb.DynamicParameterConstraints, error) {
	if depth >= maxConstraintDepth {
		return nil, p.errorf("nested deeper than %d", maxConstraintDepth)
	}
	tok := p.token("(),=")
	switch {
	case p.next('='):
		key, err := p.unescape(tok)
		if err != nil {
			return nil, err
		}
		raw := p.token("(),")
		if p.i < len(p.s) && p.s[p.i] == '(' {
			return nil, p.errorf(`unescaped "(" in value`)
		}
		val, err := p.unescape(raw)
		if err != nil {
			return nil, err
		}
		return ValueConstraint(key, val), nil
	case !p.next('('):
		if p.i == len(p.s) {
			return nil, p.errorf("unexpected end, want key=value or operator")
		}
		return nil, p.errorf("unexpected %q, want key=value or operator", p.s[p.i])
	}
	switch tok {
	case "exists":
		raw := p.token("(),=")
		if !p.next(')') {
			return nil, p.errorf(`want ")" after exists key`)
		}
		key, err := p.unescape(raw)
		if err != nil {
			return nil, err
		}
		return ExistsConstraint(key), nil
	case "not":
		m, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		if !p.next(')') {
			return nil, p.errorf(`want ")" after not's member`)
		}
		return &discoverypb.DynamicParameterConstraints{
			Type: &discoverypb.DynamicParameterConstraints_NotConstraints{NotConstraints: m},
		}, nil
	case "and", "or":
		list := &discoverypb.DynamicParameterConstraints_ConstraintList{}
		if !p.next(')') {
			for {
				m, err := p.expr(depth + 1)
				if err != nil {
					return nil, err
				}
				list.Constraints = append(list.Constraints, m)
				if p.next(')') {
					break
				}
				if !p.next(',') {
					return nil, p.errorf(`want "," or ")" in %s list`, tok)
				}
			}
		}
		if tok == "and" {
			return &discoverypb.DynamicParameterConstraints{
				Type: &discoverypb.DynamicParameterConstraints_AndConstraints{AndConstraints: list},
			}, nil
		}
		return &discoverypb.DynamicParameterConstraints{
			Type: &discoverypb.DynamicParameterConstraints_OrConstraints{OrConstraints: list},
		}, nil
	default:
		return nil, p.errorf("unknown operator %q", tok)
	}
}

// ValueConstraint is the single constraint "key has value val" (key=val).
func ValueConstraint(key, val string) *discoverypb.DynamicParameterConstraints {
	return &discoverypb.DynamicParameterConstraints{
		Type: &discoverypb.DynamicParameterConstraints_Constraint{
			Constraint: &discoverypb.DynamicParameterConstraints_SingleConstraint{
				Key: key,
				ConstraintType: &discoverypb.DynamicParameterConstraints_SingleConstraint_Value{
					Value: val,
				},
			},
		},
	}
}

// ExistsConstraint is the single constraint "key is present" (exists(key)).
func ExistsConstraint(key string) *discoverypb.DynamicParameterConstraints {
	return &discoverypb.DynamicParameterConstraints{
		Type: &discoverypb.DynamicParameterConstraints_Constraint{
			Constraint: &discoverypb.DynamicParameterConstraints_SingleConstraint{
				Key: key,
				ConstraintType: &discoverypb.DynamicParameterConstraints_SingleConstraint_Exists_{
					Exists: &discoverypb.DynamicParameterConstraints_SingleConstraint_Exists{},
				},
			},
		},
	}
}
