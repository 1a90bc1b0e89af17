package keying_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/keying"
)

// FuzzCanonical checks that parsing and formatting never panic and are
// stable: Canonical is idempotent, ParseURN(u.String()) == u and
// ParseURL(l.String()) == l, the allocation-free fast path of Canonical agrees
// with ParseURL + String, and Authority and IsGlob agree with the parsers.
//
//	go test ./keying -run '^$' -fuzz FuzzCanonical -fuzztime 60s
func FuzzCanonical(f *testing.F) {
	for _, tt := range urnTests {
		f.Add(tt.in)
	}
	for _, s := range []string{
		"xdstp://a/T/foo/*?y=2&x=1",
		"xdstp://a/T/x#entry=e,alt=xdstp://b/T/y%23entry=f",
		"xdstp://a/T/x?=&=&a",
		"xdstp://a/T/x?b=1&a",
		"xdstp://a/T/x?a=1&&b",
		"xdstp://%2F/%3F/%23?%26=%3D#entry=%2C",
		"xdstp:///",
		"*",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, cerr := keying.Canonical(s)
		if cerr == nil {
			if !keying.IsXDSTP(s) && c != s {
				t.Fatalf("Canonical(legacy %q) = %q", s, c)
			}
			if c2, err := keying.Canonical(c); err != nil || c2 != c {
				t.Fatalf("Canonical(%q) = %q; Canonical of that = %q, %v", s, c, c2, err)
			}
		} else if !keying.IsXDSTP(s) {
			t.Fatalf("Canonical(legacy %q): %v", s, cerr)
		}

		l, lerr := keying.ParseURL(s)
		if lerr == nil {
			again, err := keying.ParseURL(l.String())
			if err != nil {
				t.Fatalf("ParseURL(%q) = %q, which does not parse: %v", s, l.String(), err)
			}
			if diff := cmp.Diff(l, again); diff != "" {
				t.Fatalf("ParseURL(%q) not stable (-first +second):\n%s", s, diff)
			}
			if len(l.Directives) == 0 && (cerr != nil || c != l.URN.String()) {
				t.Fatalf("Canonical(%q) = %q, %v; ParseURL+String = %q", s, c, cerr, l.URN.String())
			}
			if a, ok := keying.Authority(s); !ok || a != l.Authority {
				t.Fatalf("Authority(%q) = %q, %v; ParseURL says %q", s, a, ok, l.Authority)
			}
			if keying.IsGlob(s) != l.IsGlob() {
				t.Fatalf("IsGlob(%q) = %v, ParseURL says %v", s, keying.IsGlob(s), l.IsGlob())
			}
			if !l.IsGlob() && !l.Glob().Matches(l.URN) {
				t.Fatalf("%q is not matched by its own glob %q", s, l.Glob())
			}
		} else if cerr == nil && keying.IsXDSTP(s) {
			t.Fatalf("Canonical(%q) = %q but ParseURL fails: %v", s, c, lerr)
		} else if keying.IsGlob(s) {
			t.Fatalf("IsGlob(%q) for a name ParseURL refuses: %v", s, lerr)
		}

		u, uerr := keying.ParseURN(s)
		if uerr != nil {
			if lerr == nil && !errors.Is(uerr, keying.ErrNotURN) {
				t.Fatalf("ParseURN(%q): %v, but ParseURL accepts it", s, uerr)
			}
			return
		}
		str := u.String()
		if str != c {
			t.Fatalf("ParseURN(%q).String() = %q, Canonical = %q", s, str, c)
		}
		again, err := keying.ParseURN(str)
		if err != nil {
			t.Fatalf("ParseURN(%q) = %q, which does not parse: %v", s, str, err)
		}
		if diff := cmp.Diff(u, again); diff != "" {
			t.Fatalf("ParseURN(%q) not stable (-first +second):\n%s", s, diff)
		}
		if !u.Equal(again) {
			t.Fatalf("ParseURN(%q): Equal disagrees with cmp", s)
		}
	})
}
