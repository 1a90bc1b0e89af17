package keying_test

import (
	"slices"
	"strconv"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/keying"
)

// FuzzConstraints builds random constraint trees (bounded depth and size) and
// parameter sets from the fuzz input and checks that nothing panics, that
// CanonicalConstraints is idempotent through ParseConstraints and does not
// change under member reordering, nesting, duplication or double negation,
// that the canonical form matches the same parameters as the tree, that
// CanonicalParams round-trips, and that Select does not depend on the order
// of the variants.
//
//	go test ./keying -run '^$' -fuzz FuzzConstraints -fuzztime 30s
func FuzzConstraints(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{6, 3, 2, 0, 0, 8, 4, 1, 7, 2, 2, 1, 1, 2, 2, 2, 3, 0, 0, 1, 1}, []byte{1, 2, 3})
	f.Add([]byte{7, 3, 6, 2, 2, 0, 1, 4, 2, 5, 3, 8, 8, 3, 1, 1, 9, 2, 6, 1, 1}, []byte{5, 4, 3, 2, 1, 0})
	f.Add([]byte("\x06\x03\x02\x00\x00\x08\x04\x01\x02\x03\x03\x02\x01\x04\x02"), []byte{0xff, 0x80, 7})
	f.Fuzz(func(t *testing.T, data, perm []byte) {
		src := &byteSource{b: data}
		var trees []*dpc
		for range 3 {
			trees = append(trees, src.tree(0))
		}
		var paramSets []map[string]string
		for range 4 {
			paramSets = append(paramSets, src.params())
		}
		paramSets = append(paramSets, nil)

		for _, c := range trees {
			s := keying.CanonicalConstraints(c)
			back, err := keying.ParseConstraints(s)
			if err != nil {
				t.Fatalf("ParseConstraints(CanonicalConstraints(%v) = %q): %v", c, s, err)
			}
			if again := keying.CanonicalConstraints(back); again != s {
				t.Fatalf("not idempotent: %v → %q → %q", c, s, again)
			}
			ps := &byteSource{b: perm}
			shuffled := ps.rewrite(c, 0)
			if got := keying.CanonicalConstraints(shuffled); got != s {
				t.Fatalf("canonical form changed by a rewrite:\n%v → %q\n%v → %q", c, s, shuffled, got)
			}
			for _, p := range paramSets {
				want := keying.Match(c, p)
				if got := keying.Match(back, p); got != want {
					t.Fatalf("Match(%q, %v) = %v; Match(%v) = %v", s, p, got, c, want)
				}
				if got := keying.Match(shuffled, p); got != want {
					t.Fatalf("Match(%v, %v) = %v; Match(%v) = %v", shuffled, p, got, c, want)
				}
			}
		}

		for _, p := range paramSets {
			cp := keying.CanonicalParams(p)
			back, err := keying.ParseParams(cp)
			if err != nil {
				t.Fatalf("ParseParams(%q): %v", cp, err)
			}
			want := p
			if len(want) == 0 {
				want = nil
			}
			if diff := cmp.Diff(want, back); diff != "" {
				t.Fatalf("ParseParams(CanonicalParams(%v) = %q) (-want +got):\n%s", p, cp, diff)
			}
		}

		variants := make([]keying.Variant, len(trees))
		for i, c := range trees {
			variants[i] = keying.Variant{Constraints: c, Key: strconv.Itoa(i)}
		}
		reversed := []keying.Variant{variants[2], variants[1], variants[0]}
		rotated := []keying.Variant{variants[1], variants[2], variants[0]}
		for _, p := range paramSets {
			v1, a1, ok1 := keying.Select(variants, p)
			v2, a2, ok2 := keying.Select(reversed, p)
			v3, a3, ok3 := keying.Select(rotated, p)
			if v1.Key != v2.Key || a1 != a2 || ok1 != ok2 || v1.Key != v3.Key || a1 != a3 || ok1 != ok3 {
				t.Fatalf("Select(%v) depends on order: %q %v %v / %q %v %v / %q %v %v",
					p, v1.Key, a1, ok1, v2.Key, a2, ok2, v3.Key, a3, ok3)
			}
			if ok1 && !keying.Match(v1.Constraints, p) {
				t.Fatalf("Select(%v) picked %q, which does not match", p, v1.Key)
			}
		}
	})
}

// Small alphabets, so that random trees share keys and values (and collide,
// dedupe and match), including the characters the canonical forms escape.
var (
	fuzzKeys   = []string{"a", "b", "c", "", "k=", "(x)", "%", "a,b", "exists", "and"}
	fuzzValues = []string{"1", "2", "", "=", "(y)", "%25", ",", "or()"}
)

const (
	fuzzMaxDepth = 5
	fuzzMaxNodes = 48
)

// byteSource hands out the fuzz bytes; past the end it returns zeros.
type byteSource struct {
	b     []byte
	i     int
	nodes int
}

func (s *byteSource) next() int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1])
}

func (s *byteSource) pick(xs []string) string { return xs[s.next()%len(xs)] }

// tree builds a random constraint tree, every oddity of the proto included:
// nil and empty nodes, nil lists, a single constraint with no matcher.
func (s *byteSource) tree(depth int) *dpc {
	s.nodes++
	op := s.next() % 12
	if depth >= fuzzMaxDepth || s.nodes >= fuzzMaxNodes {
		op %= 6 // leaves only
	}
	switch op {
	case 0:
		return nil
	case 1:
		return &dpc{}
	case 2, 3:
		return val(s.pick(fuzzKeys), s.pick(fuzzValues))
	case 4:
		return exists(s.pick(fuzzKeys))
	case 5:
		if s.next()%2 == 0 {
			return noMatcher(s.pick(fuzzKeys))
		}
		return &dpc{Type: &discoverypb.DynamicParameterConstraints_Constraint{}}
	case 6, 7:
		return and(s.list(depth)...)
	case 8, 9:
		return or(s.list(depth)...)
	case 10:
		return not(s.tree(depth + 1))
	default:
		switch s.next() % 3 {
		case 0:
			return &dpc{Type: &discoverypb.DynamicParameterConstraints_AndConstraints{}}
		case 1:
			return &dpc{Type: &discoverypb.DynamicParameterConstraints_OrConstraints{}}
		default:
			return &dpc{Type: &discoverypb.DynamicParameterConstraints_NotConstraints{}}
		}
	}
}

func (s *byteSource) list(depth int) []*dpc {
	n := s.next() % 5
	ms := make([]*dpc, 0, n)
	for range n {
		ms = append(ms, s.tree(depth+1))
	}
	return ms
}

func (s *byteSource) params() map[string]string {
	n := s.next() % 5
	if n == 0 {
		return nil
	}
	p := make(map[string]string, n)
	for range n {
		p[s.pick(fuzzKeys)] = s.pick(fuzzValues)
	}
	return p
}

// rewrite returns a deep copy of c changed in ways that must not change its
// canonical form: list members rotated and reversed, a member duplicated,
// members regrouped into a nested list of the same kind, a node wrapped in a
// one-member list or in not(not(...)).
func (s *byteSource) rewrite(c *dpc, depth int) *dpc {
	var out *dpc
	switch t := c.GetType().(type) {
	case *discoverypb.DynamicParameterConstraints_AndConstraints:
		if t.AndConstraints == nil {
			return c
		}
		out = and(s.rewriteList(t.AndConstraints.GetConstraints(), depth, and)...)
	case *discoverypb.DynamicParameterConstraints_OrConstraints:
		if t.OrConstraints == nil {
			return c
		}
		out = or(s.rewriteList(t.OrConstraints.GetConstraints(), depth, or)...)
	case *discoverypb.DynamicParameterConstraints_NotConstraints:
		out = not(s.rewrite(t.NotConstraints, depth+1))
	default:
		out = c // leaves are immutable here; sharing them is fine
	}
	if depth > 2*fuzzMaxDepth {
		return out
	}
	switch s.next() % 8 {
	case 0:
		return and(out)
	case 1:
		return or(out)
	case 2:
		if out != nil {
			return not(not(out))
		}
	}
	return out
}

func (s *byteSource) rewriteList(ms []*dpc, depth int, wrap func(...*dpc) *dpc) []*dpc {
	out := make([]*dpc, 0, len(ms)+1)
	for _, m := range ms {
		out = append(out, s.rewrite(m, depth+1))
	}
	if len(out) == 0 {
		return out
	}
	if r := s.next() % len(out); r > 0 {
		out = slices.Concat(out[r:], out[:r])
	}
	switch s.next() % 4 {
	case 0:
		slices.Reverse(out)
	case 1:
		out = append(out, out[s.next()%len(out)])
	case 2:
		if len(out) >= 2 {
			out = append([]*dpc{wrap(out[0], out[1])}, out[2:]...)
		}
	}
	return out
}
