package authz_test

import (
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/authz"
)

// matchRecursive is Match as it was before it ran in one pass: the
// reference its semantics are checked against. It is exponential in the
// number of '*'.
func matchRecursive(pattern, s string) bool {
	for {
		star := strings.IndexByte(pattern, '*')
		if star < 0 {
			return pattern == s
		}
		if !strings.HasPrefix(s, pattern[:star]) {
			return false
		}
		s, pattern = s[star:], pattern[star+1:]
		if pattern == "" {
			return true
		}
		// Try every position for the rest of the pattern.
		for i := 0; i <= len(s); i++ {
			if matchRecursive(pattern, s[i:]) {
				return true
			}
		}
		return false
	}
}

var matchCases = []struct {
	pattern, s string
	want       bool
}{
	{"", "", true},
	{"", "a", false},
	{"a", "", false},
	{"abc", "abc", true},
	{"abc", "abcd", false},
	{"abc", "ab", false},
	{"*", "", true},
	{"*", "anything/at all", true},
	{"**", "", true},
	{"***", "x", true},
	{"a*", "a", true},
	{"a*", "abc", true},
	{"a*", "ba", false},
	{"*a", "a", true},
	{"*a", "bca", true},
	{"*a", "ab", false},
	{"a*a", "a", false}, // prefix and suffix may not overlap
	{"a*a", "aa", true},
	{"a*a", "aba", true},
	{"ab*ba", "aba", false},
	{"ab*ba", "abba", true},
	{"*ab*", "xaby", true},
	{"*ab*", "xayb", false},
	{"a*b*c", "abc", true},
	{"a*b*c", "acb", false},
	{"a*b*c", "abcbc", true},
	{"a*b*c", "abcb", false},
	{"*aa*aa*", "aaa", false},
	{"*aa*aa*", "aaaa", true},
	{"*aa*a", "aaa", true},
	{"*aba*ab", "abab", false},
	{"*aba*ab", "ababab", true},
	{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 20), false},
	{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 20) + "b", true},
	{"envoy-*", "envoy-1", true},
	{"envoy-*", "envoy", false},
	{"spiffe://example.org/ns/*/sa/*", "spiffe://example.org/ns/prod/sa/web", true},
	{"spiffe://example.org/ns/*/sa/*", "spiffe://example.org/ns/prod/web", false},
	{"xdstp://*/envoy.config.cluster.v3.Cluster/*", "xdstp://a/envoy.config.cluster.v3.Cluster/c", true},
	{"?", "a", false}, // only '*' is special
	{"[a]", "a", false},
	{"a\\*", "a\\", true},
	{"a\\*", "a*", false},
	{"é*", "é", true},
	{"*\xff", "a\xff", true},
	{"\x00*\x00", "\x00", false},
}

func TestMatch(t *testing.T) {
	for _, tc := range matchCases {
		if got := authz.Match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
		if old := matchRecursive(tc.pattern, tc.s); old != tc.want {
			t.Errorf("the recursive Match(%q, %q) = %v, want %v", tc.pattern, tc.s, old, tc.want)
		}
	}
}

// TestMatchExhaustive compares Match with the recursive reference on every
// pattern over {a, b, *} up to 6 characters and every string over {a, b} up
// to 7: the small alphabet makes overlaps, repeats and backtracking likely.
func TestMatchExhaustive(t *testing.T) {
	patterns := words("ab*", 6)
	subjects := words("ab", 7)
	for _, p := range patterns {
		for _, s := range subjects {
			if got, want := authz.Match(p, s), matchRecursive(p, s); got != want {
				t.Fatalf("Match(%q, %q) = %v, the recursive reference says %v", p, s, got, want)
			}
		}
	}
}

// words returns every string over alphabet of length 0 to n.
func words(alphabet string, n int) []string {
	out := []string{""}
	level := []string{""}
	for range n {
		var next []string
		for _, w := range level {
			for i := range len(alphabet) {
				next = append(next, w+alphabet[i:i+1])
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// FuzzMatch checks that Match agrees with the recursive reference. Inputs
// are bounded so the reference stays fast.
//
//	go test ./authz -run '^$' -fuzz '^FuzzMatch$' -fuzztime 60s
func FuzzMatch(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.pattern, tc.s)
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 16 || len(s) > 32 || strings.Count(pattern, "*") > 5 {
			t.Skip()
		}
		if got, want := authz.Match(pattern, s), matchRecursive(pattern, s); got != want {
			t.Fatalf("Match(%q, %q) = %v, the recursive reference says %v", pattern, s, got, want)
		}
	})
}

// BenchmarkMatch compares Match with the recursive implementation it
// replaced on patterns whose stars make the latter backtrack: a string of 'a'
// against "*a*a…*b", which never matches.
func BenchmarkMatch(b *testing.B) {
	for _, bm := range []struct {
		name, pattern, s string
		recursive        bool // also run the recursive one (too slow for the largest)
	}{
		{"exact", "envoy-sidecar-1", "envoy-sidecar-1", true},
		{"prefix", "envoy-*", "envoy-sidecar-1", true},
		{"stars=4/len=64", "*a*a*a*b", strings.Repeat("a", 64), true},
		{"stars=6/len=32", "*a*a*a*a*a*b", strings.Repeat("a", 32), true},
		{"stars=9/len=32", "*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 32), true},
		{"stars=9/len=64", "*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 64), false},
	} {
		b.Run("linear/"+bm.name, func(b *testing.B) {
			for b.Loop() {
				authz.Match(bm.pattern, bm.s)
			}
		})
		if bm.recursive {
			b.Run("recursive/"+bm.name, func(b *testing.B) {
				for b.Loop() {
					matchRecursive(bm.pattern, bm.s)
				}
			})
		}
	}
}
