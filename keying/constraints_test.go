package keying_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/xds-relay/xds-relay/keying"
)

type dpc = discoverypb.DynamicParameterConstraints

// Builders for constraint trees, named after the proto fields.

func val(k, v string) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_Constraint{
		Constraint: &discoverypb.DynamicParameterConstraints_SingleConstraint{
			Key:            k,
			ConstraintType: &discoverypb.DynamicParameterConstraints_SingleConstraint_Value{Value: v},
		},
	}}
}

func exists(k string) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_Constraint{
		Constraint: &discoverypb.DynamicParameterConstraints_SingleConstraint{
			Key: k,
			ConstraintType: &discoverypb.DynamicParameterConstraints_SingleConstraint_Exists_{
				Exists: &discoverypb.DynamicParameterConstraints_SingleConstraint_Exists{},
			},
		},
	}}
}

// noMatcher is a single constraint with neither value nor exists set.
func noMatcher(k string) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_Constraint{
		Constraint: &discoverypb.DynamicParameterConstraints_SingleConstraint{Key: k},
	}}
}

func and(ms ...*dpc) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_AndConstraints{
		AndConstraints: &discoverypb.DynamicParameterConstraints_ConstraintList{Constraints: ms},
	}}
}

func or(ms ...*dpc) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_OrConstraints{
		OrConstraints: &discoverypb.DynamicParameterConstraints_ConstraintList{Constraints: ms},
	}}
}

func not(m *dpc) *dpc {
	return &dpc{Type: &discoverypb.DynamicParameterConstraints_NotConstraints{NotConstraints: m}}
}

type params = map[string]string

func TestMatch(t *testing.T) {
	tests := []struct {
		name string
		c    *dpc
		p    params
		want bool
	}{
		{"nil matches all", nil, params{"env": "prod"}, true},
		{"nil, no params", nil, nil, true},
		{"empty matches all", &dpc{}, params{"env": "prod"}, true},
		{"value", val("env", "prod"), params{"env": "prod"}, true},
		{"value other", val("env", "prod"), params{"env": "test"}, false},
		{"value absent", val("env", "prod"), nil, false},
		{"value is exact", val("env", "prod"), params{"env": "Prod"}, false},
		{"empty value present", val("env", ""), params{"env": ""}, true},
		{"empty value absent", val("env", ""), params{}, false},
		{"unmentioned key does not block", val("env", "prod"), params{"env": "prod", "zone": "a"}, true},
		{"exists", exists("version"), params{"version": "2"}, true},
		{"exists empty value", exists("version"), params{"version": ""}, true},
		{"exists absent", exists("version"), params{"env": "prod"}, false},
		{"not exists absent", not(exists("version")), params{"env": "prod"}, true},
		{"not exists present", not(exists("version")), params{"version": "2"}, false},
		{"no matcher fails closed", noMatcher("env"), params{"env": "prod"}, false},
		{"nil single fails closed", &dpc{Type: &discoverypb.DynamicParameterConstraints_Constraint{}}, nil, false},
		{"not no matcher", not(noMatcher("env")), nil, true},
		{"and", and(val("a", "1"), val("b", "2")), params{"a": "1", "b": "2"}, true},
		{"and one fails", and(val("a", "1"), val("b", "2")), params{"a": "1", "b": "3"}, false},
		{"and empty", and(), nil, true},
		{"and nil list", &dpc{Type: &discoverypb.DynamicParameterConstraints_AndConstraints{}}, nil, true},
		{"or", or(val("a", "1"), val("a", "2")), params{"a": "2"}, true},
		{"or none", or(val("a", "1"), val("a", "2")), params{"a": "3"}, false},
		{"or empty", or(), params{"a": "1"}, false},
		{"or nil list", &dpc{Type: &discoverypb.DynamicParameterConstraints_OrConstraints{}}, nil, false},
		{"or with empty member", or(val("a", "1"), &dpc{}), nil, true},
		{"not", not(val("a", "1")), params{"a": "2"}, true},
		{"not absent", not(val("a", "1")), nil, true},
		{"not nil", &dpc{Type: &discoverypb.DynamicParameterConstraints_NotConstraints{}}, nil, false},
		{"nil members", and(nil, or(nil)), nil, true},
		{"nested", or(and(val("a", "1"), not(exists("b"))), val("b", "x")), params{"a": "1", "b": "x"}, true},
		{"nested miss", or(and(val("a", "1"), not(exists("b"))), val("b", "x")), params{"a": "1", "b": "y"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keying.Match(tt.c, tt.p); got != tt.want {
				t.Errorf("Match(%v, %v) = %v, want %v", tt.c, tt.p, got, tt.want)
			}
			// The canonical form means the same.
			back, err := keying.ParseConstraints(keying.CanonicalConstraints(tt.c))
			if err != nil {
				t.Fatal(err)
			}
			if got := keying.Match(back, tt.p); got != tt.want {
				t.Errorf("Match(Parse(%q), %v) = %v, want %v", keying.CanonicalConstraints(tt.c), tt.p, got, tt.want)
			}
		})
	}
}

// selection is one subscriber's expected pick among a resource's variants.
type selection struct {
	p         params
	want      string // Variant.Key; "" for no match
	ambiguous bool
}

func variantsOf(cs ...*dpc) []keying.Variant {
	vs := make([]keying.Variant, len(cs))
	for i, c := range cs {
		vs[i] = keying.Variant{Constraints: c, Key: keying.CanonicalConstraints(c)}
	}
	return vs
}

// TestTP2Examples replays the examples of xRFC TP2.
func TestTP2Examples(t *testing.T) {
	tests := []struct {
		name     string
		variants []keying.Variant
		subs     []selection
	}{
		{
			name:     "basic usage",
			variants: variantsOf(val("env", "prod"), val("env", "test")),
			subs: []selection{
				{p: params{"env": "prod"}, want: "env=prod"},
				{p: params{"env": "test"}, want: "env=test"},
				{p: params{"env": "qa"}},
				{p: nil},
			},
		},
		{
			name:     "unconstrained parameters",
			variants: variantsOf(nil),
			subs: []selection{
				{p: params{"env": "prod"}, want: ""},
				{p: params{"env": "test", "version": "v1"}, want: ""},
			},
		},
		{
			name:     "transition: clients send the new key first",
			variants: variantsOf(val("env", "prod"), val("env", "test")),
			subs: []selection{
				{p: params{"env": "prod", "version": "v1"}, want: "env=prod"},
				{p: params{"env": "prod", "version": "v2"}, want: "env=prod"},
				{p: params{"env": "test", "version": "v1"}, want: "env=test"},
				{p: params{"env": "test", "version": "v2"}, want: "env=test"},
			},
		},
		{
			name: "transition: then the server splits env=prod by version",
			variants: variantsOf(
				and(val("env", "prod"), val("version", "v1")),
				and(val("env", "prod"), val("version", "v2")),
				val("env", "test"),
			),
			subs: []selection{
				{p: params{"env": "prod", "version": "v1"}, want: "and(env=prod,version=v1)"},
				{p: params{"env": "prod", "version": "v2"}, want: "and(env=prod,version=v2)"},
				{p: params{"env": "test", "version": "v1"}, want: "env=test"},
			},
		},
		{
			// The brief's form of the same: old clients without version get the
			// "not exists" default, new ones their version's variant.
			name: "new key on the server first, with an exists default",
			variants: variantsOf(
				and(val("env", "prod"), not(exists("version"))),
				and(val("env", "prod"), val("version", "2")),
			),
			subs: []selection{
				{p: params{"env": "prod"}, want: "and(env=prod,not(exists(version)))"},
				{p: params{"env": "prod", "version": "2"}, want: "and(env=prod,version=2)"},
				{p: params{"env": "prod", "version": "3"}},
				{p: params{"env": "test"}},
			},
		},
		{
			// Without the default, new clients match both: undefined in TP2; we
			// pick the most specific variant and say it was ambiguous.
			name: "new key on the server first, without a default",
			variants: variantsOf(
				val("env", "prod"),
				and(val("env", "prod"), val("version", "v1")),
			),
			subs: []selection{
				{p: params{"env": "prod"}, want: "env=prod"},
				{p: params{"env": "prod", "version": "v1"}, want: "and(env=prod,version=v1)", ambiguous: true},
			},
		},
		{
			name: "overlapping constraint values",
			variants: variantsOf(
				or(val("env", "prod"), val("env", "test")),
				or(val("env", "qa"), val("env", "test")),
			),
			subs: []selection{
				{p: params{"env": "prod"}, want: "or(env=prod,env=test)"},
				{p: params{"env": "qa"}, want: "or(env=qa,env=test)"},
				// Equally specific: the smaller canonical string wins.
				{p: params{"env": "test"}, want: "or(env=prod,env=test)", ambiguous: true},
			},
		},
		{
			name: "background: four variants instead of nine",
			variants: variantsOf(
				and(not(val("env", "prod")), not(val("version", "v1"))),
				and(val("env", "prod"), not(val("version", "v1"))),
				and(not(val("env", "prod")), val("version", "v1")),
				and(val("env", "prod"), val("version", "v1")),
			),
			subs: []selection{
				{p: params{"env": "prod", "version": "v1"}, want: "and(env=prod,version=v1)"},
				{p: params{"env": "prod", "version": "v2"}, want: "and(env=prod,not(version=v1))"},
				{p: params{"env": "prod", "version": "v3"}, want: "and(env=prod,not(version=v1))"},
				{p: params{"env": "canary", "version": "v1"}, want: "and(not(env=prod),version=v1)"},
				{p: params{"env": "test", "version": "v1"}, want: "and(not(env=prod),version=v1)"},
				{p: params{"env": "canary", "version": "v2"}, want: "and(not(env=prod),not(version=v1))"},
				{p: params{"env": "test", "version": "v3"}, want: "and(not(env=prod),not(version=v1))"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range tt.subs {
				checkSelect(t, tt.variants, s)
			}
		})
	}
}

// checkSelect checks Select on every rotation and the reverse of variants:
// the pick must not depend on their order.
func checkSelect(t *testing.T, variants []keying.Variant, s selection) {
	t.Helper()
	orders := [][]keying.Variant{slices.Clone(variants)}
	for i := 1; i < len(variants); i++ {
		orders = append(orders, append(slices.Clone(variants[i:]), variants[:i]...))
	}
	rev := slices.Clone(variants)
	slices.Reverse(rev)
	orders = append(orders, rev)
	wantOK := s.want != "" || slices.ContainsFunc(variants, func(v keying.Variant) bool {
		return v.Key == "" && keying.Match(v.Constraints, s.p)
	})
	for _, vs := range orders {
		got, amb, ok := keying.Select(vs, s.p)
		if ok != wantOK || got.Key != s.want || amb != s.ambiguous {
			t.Errorf("Select(%v) = %q, ambiguous %v, ok %v; want %q, %v, %v",
				s.p, got.Key, amb, ok, s.want, s.ambiguous, wantOK)
		}
	}
}

func TestSelect(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		if got, amb, ok := keying.Select(nil, params{"a": "1"}); ok || amb || got != (keying.Variant{}) {
			t.Errorf("Select(nil) = %v, %v, %v", got, amb, ok)
		}
	})
	t.Run("returns the variant itself", func(t *testing.T) {
		c := val("a", "1")
		got, amb, ok := keying.Select([]keying.Variant{{Constraints: val("a", "2"), Key: "x"}, {Constraints: c, Key: "y"}}, params{"a": "1"})
		if !ok || amb || got.Key != "y" || got.Constraints != c {
			t.Errorf("Select = %v, %v, %v", got, amb, ok)
		}
	})
	t.Run("duplicates count once for specificity", func(t *testing.T) {
		// and(a=1,a=1) is just a=1: b=2's variant is more specific.
		checkSelect(t, []keying.Variant{
			{Constraints: and(val("a", "1"), val("a", "1"), val("a", "1")), Key: "dup"},
			{Constraints: and(val("a", "1"), val("b", "2")), Key: "two"},
		}, selection{p: params{"a": "1", "b": "2"}, want: "two", ambiguous: true})
	})
	t.Run("same constraints: smallest key", func(t *testing.T) {
		checkSelect(t, []keying.Variant{
			{Constraints: val("a", "1"), Key: "k2"},
			{Constraints: and(val("a", "1")), Key: "k1"},
			{Constraints: val("a", "1"), Key: "k3"},
		}, selection{p: params{"a": "1"}, want: "k1", ambiguous: true})
	})
	t.Run("unconstrained variant loses to a constrained one", func(t *testing.T) {
		checkSelect(t, variantsOf(nil, val("a", "1")),
			selection{p: params{"a": "1"}, want: "a=1", ambiguous: true})
	})
}

var canonicalTests = []struct {
	name string
	c    *dpc
	want string
}{
	{"nil", nil, ""},
	{"empty", &dpc{}, ""},
	{"value", val("env", "prod"), "env=prod"},
	{"exists", exists("version"), "exists(version)"},
	{"not exists", not(exists("version")), "not(exists(version))"},
	{"empty key and value", val("", ""), "="},
	{"exists empty key", exists(""), "exists()"},
	{"operator names as keys", and(val("and", "or"), exists("not")), "and(and=or,exists(not))"},
	{"escapes", val("k=(a,b)%", "v=(c,d)%"), "k%3D%28a%2Cb%29%25=v=%28c%2Cd%29%25"},
	{"other bytes as is", val("ké y", "a&b#c d\x00"), "ké y=a&b#c d\x00"},
	{"sorted", and(val("version", "v1"), val("env", "prod")), "and(env=prod,version=v1)"},
	{"sorted by canonical form", or(not(val("a", "1")), exists("z"), val("b", "2")), "or(b=2,exists(z),not(a=1))"},
	{"deduped", or(val("a", "1"), val("a", "2"), val("a", "1")), "or(a=1,a=2)"},
	{"flattened and", and(val("c", "3"), and(val("b", "2"), and(val("a", "1")))), "and(a=1,b=2,c=3)"},
	{"flattened or", or(or(val("c", "3"), val("b", "2")), val("a", "1")), "or(a=1,b=2,c=3)"},
	{"or in and kept", and(or(val("a", "1"), val("a", "2")), val("b", "1")), "and(b=1,or(a=1,a=2))"},
	{"single member", and(val("a", "1")), "a=1"},
	{"single after dedupe", and(val("a", "1"), val("a", "1")), "a=1"},
	{"double not", not(not(val("a", "1"))), "a=1"},
	{"triple not", not(not(not(val("a", "1")))), "not(a=1)"},
	{"not of and of one", not(and(not(val("a", "1")))), "a=1"},
	{"flatten after double not", and(val("a", "1"), not(not(and(val("c", "3"), val("b", "2"))))), "and(a=1,b=2,c=3)"},
	{"empty and", and(), ""},
	{"empty or", or(), "or()"},
	{"nil and list", &dpc{Type: &discoverypb.DynamicParameterConstraints_AndConstraints{}}, ""},
	{"nil or list", &dpc{Type: &discoverypb.DynamicParameterConstraints_OrConstraints{}}, "or()"},
	{"not empty", not(&dpc{}), "or()"},
	{"not nil", &dpc{Type: &discoverypb.DynamicParameterConstraints_NotConstraints{}}, "or()"},
	{"not empty or", not(or()), ""},
	{"no matcher", noMatcher("a"), "or()"},
	{"true member of and dropped", and(val("a", "1"), &dpc{}, and()), "a=1"},
	{"false member of or dropped", or(val("a", "1"), or(), noMatcher("x")), "a=1"},
	{"true member decides or", or(val("a", "1"), not(or())), ""},
	{"false member decides and", and(val("a", "1"), noMatcher("x")), "or()"},
	{"nil members", and(nil, val("a", "1"), nil), "a=1"},
	{
		"xRFC new key with exists default",
		and(val("env", "prod"), not(exists("version"))),
		"and(env=prod,not(exists(version)))",
	},
}

func TestCanonicalConstraints(t *testing.T) {
	for _, tt := range canonicalTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keying.CanonicalConstraints(tt.c); got != tt.want {
				t.Errorf("CanonicalConstraints(%v) = %q, want %q", tt.c, got, tt.want)
			}
			back, err := keying.ParseConstraints(tt.want)
			if err != nil {
				t.Fatalf("ParseConstraints(%q): %v", tt.want, err)
			}
			if got := keying.CanonicalConstraints(back); got != tt.want {
				t.Errorf("CanonicalConstraints(ParseConstraints(%q)) = %q", tt.want, got)
			}
			// The same after the wire.
			b, err := proto.Marshal(tt.c)
			if err != nil {
				t.Skipf("not marshalable: %v", err)
			}
			var wire dpc
			if err := proto.Unmarshal(b, &wire); err != nil {
				t.Fatal(err)
			}
			if got := keying.CanonicalConstraints(&wire); got != tt.want {
				t.Errorf("CanonicalConstraints after the wire = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCanonicalConstraintsOrderInsensitive(t *testing.T) {
	a := and(val("env", "prod"), or(val("zone", "a"), val("zone", "b"), exists("canary")), not(exists("version")))
	b := and(not(exists("version")), and(or(exists("canary"), or(val("zone", "b"), val("zone", "a"))), val("env", "prod")))
	if ca, cb := keying.CanonicalConstraints(a), keying.CanonicalConstraints(b); ca != cb {
		t.Errorf("canonical forms differ:\n%s\n%s", ca, cb)
	}
}

func TestCanonicalConstraintsDoesNotModify(t *testing.T) {
	c := and(val("b", "2"), and(val("a", "1")), not(not(val("c", "3"))))
	before := proto.Clone(c)
	keying.CanonicalConstraints(c)
	if diff := cmp.Diff(before, c, protocmp.Transform()); diff != "" {
		t.Errorf("CanonicalConstraints modified its argument (-before +after):\n%s", diff)
	}
}

func TestParseConstraints(t *testing.T) {
	tests := []struct {
		in   string
		want *dpc
	}{
		{"", nil},
		{"env=prod", val("env", "prod")},
		{"=", val("", "")},
		{"a==b", val("a", "=b")},
		{"exists(version)", exists("version")},
		{"exists()", exists("")},
		{"not(exists(version))", not(exists("version"))},
		{"and()", and()},
		{"or()", or()},
		{"and(a=1)", and(val("a", "1"))},
		{"and(b=2,a=1,and(c=3))", and(val("b", "2"), val("a", "1"), and(val("c", "3")))},
		{"or(a=1,not(b=2))", or(val("a", "1"), not(val("b", "2")))},
		{"k%3d%28=v%2c%29%25", val("k=(", "v,)%")},
		{"a= b ", val("a", " b ")},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := keying.ParseConstraints(tt.in)
			if err != nil {
				t.Fatalf("ParseConstraints(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("ParseConstraints(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseConstraintsErrors(t *testing.T) {
	for _, in := range []string{
		"a", "a,b=1", "(a=1)", "foo(a=1)", "AND(a=1)", "and", "and(", "and(a=1", "and(a=1,)",
		"and(,a=1)", "and(a=1))", "a=1)", "a=1,b=2", "a=(", "a=b(", "not()", "not(a=1,b=2)",
		"not(a=1", "exists(a", "exists(a=1)", "exists(a)b", "exists((a))", "a%2=1", "a=%zz",
		"exists(%)", " and(a=1)",
	} {
		t.Run(in, func(t *testing.T) {
			c, err := keying.ParseConstraints(in)
			if !errors.Is(err, keying.ErrMalformedConstraints) {
				t.Errorf("ParseConstraints(%q) = %v, %v; want ErrMalformedConstraints", in, c, err)
			}
		})
	}
}

func TestParseConstraintsDepth(t *testing.T) {
	deep := func(n int) string {
		s := "a=1"
		for range n {
			s = "not(" + s + ")"
		}
		return s
	}
	if _, err := keying.ParseConstraints(deep(9999)); err != nil {
		t.Errorf("depth 9999: %v", err)
	}
	if _, err := keying.ParseConstraints(deep(10000)); !errors.Is(err, keying.ErrMalformedConstraints) {
		t.Errorf("depth 10000: %v, want ErrMalformedConstraints", err)
	}
}

func TestCanonicalParams(t *testing.T) {
	tests := []struct {
		p    params
		want string
	}{
		{nil, ""},
		{params{}, ""},
		{params{"env": "prod"}, "env=prod"},
		{params{"version": "2", "env": "prod", "a": ""}, "a=&env=prod&version=2"},
		{params{"": ""}, "="},
		{params{"k=&#%": "v=&#%"}, "k%3D%26%23%25=v=%26%23%25"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := keying.CanonicalParams(tt.p); got != tt.want {
				t.Errorf("CanonicalParams(%v) = %q, want %q", tt.p, got, tt.want)
			}
			back, err := keying.ParseParams(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.p
			if len(want) == 0 {
				want = nil
			}
			if diff := cmp.Diff(want, back); diff != "" {
				t.Errorf("ParseParams(%q) (-want +got):\n%s", tt.want, diff)
			}
		})
	}
	if _, err := keying.ParseParams("a=%zz"); !errors.Is(err, keying.ErrMalformedConstraints) {
		t.Errorf("ParseParams(bad escape) = %v, want ErrMalformedConstraints", err)
	}
}

// Benchmarks: the typical selection among three variants of one resource
// (the TP2 "exists default" shape), and the canonical form of one of them.

var benchVariants = variantsOf(
	and(val("env", "prod"), not(exists("version"))),
	and(val("env", "prod"), val("version", "v1")),
	and(val("env", "prod"), val("version", "v2")),
)

func BenchmarkMatch(b *testing.B) {
	p := params{"env": "prod", "version": "v2", "zone": "us-east1-b"}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for _, v := range benchVariants {
			if keying.Match(v.Constraints, p) {
				n++
			}
		}
		if n != 1 {
			b.Fatalf("%d variants match", n)
		}
	}
}

func BenchmarkSelect(b *testing.B) {
	p := params{"env": "prod", "version": "v2", "zone": "us-east1-b"}
	b.ReportAllocs()
	for b.Loop() {
		if v, amb, ok := keying.Select(benchVariants, p); !ok || amb || v.Key != "and(env=prod,version=v2)" {
			b.Fatalf("Select = %v, %v, %v", v, amb, ok)
		}
	}
}

func BenchmarkCanonicalConstraints(b *testing.B) {
	for _, bc := range []struct {
		name string
		c    *dpc
	}{
		{"exists-default", benchVariants[0].Constraints},
		{"nested-unsorted", and(val("version", "v1"), val("env", "prod"), or(val("zone", "b"), val("zone", "a")))},
	} {
		c := bc.c
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				keying.CanonicalConstraints(c)
			}
		})
	}
}

func ExampleSelect() {
	variants := []keying.Variant{
		{Constraints: and(val("env", "prod"), not(exists("version"))), Key: "default"},
		{Constraints: and(val("env", "prod"), val("version", "2")), Key: "v2"},
	}
	for _, p := range []params{{"env": "prod"}, {"env": "prod", "version": "2"}, {"env": "test"}} {
		v, ambiguous, ok := keying.Select(variants, p)
		fmt.Println(keying.CanonicalParams(p), "→", v.Key, ambiguous, ok)
	}
	fmt.Println(keying.CanonicalConstraints(variants[0].Constraints))
	// Output:
	// env=prod → default false true
	// env=prod&version=2 → v2 false true
	// env=test →  false false
	// and(env=prod,not(exists(version)))
}
