package keying_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/keying"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const lt = "envoy.config.listener.v3.Listener"

// Vectors derived from envoy's test/common/config/xds_resource_test.cc
// (DecodeEncode, PathDividerEscape, DecodeSuccess, DecodeEmpty, DecodeFail) and
// grpc-go's internal/xds/xdsclient/xdsresource/name_test.go, plus our own
// decisions (see ParseURN).
var urnTests = []struct {
	name    string
	in      string
	want    keying.URN
	wantStr string // canonical form; "" means the input is already canonical
	wantErr error
}{
	// envoy DecodeEncode: already canonical, so they round-trip byte for byte.
	{name: "type only, empty authority", in: "xdstp:///" + lt, want: keying.URN{ResourceType: lt}},
	{name: "type only", in: "xdstp://foo/" + lt, want: keying.URN{Authority: "foo", ResourceType: lt}},
	{name: "simple id", in: "xdstp://foo/" + lt + "/bar", want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar"}},
	{name: "id with slash", in: "xdstp://foo/" + lt + "/bar/baz", want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar/baz"}},
	{name: "id with empty segments", in: "xdstp://foo/" + lt + "/bar////baz", want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar////baz"}},
	{name: "params without id", in: "xdstp://foo/" + lt + "?ab=cde",
		want: keying.URN{Authority: "foo", ResourceType: lt, ContextParams: map[string]string{"ab": "cde"}}},
	{name: "empty value", in: "xdstp://foo/" + lt + "/bar/baz?ab=",
		want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar/baz", ContextParams: map[string]string{"ab": ""}}},
	{name: "empty key", in: "xdstp://foo/" + lt + "/bar/baz?=cd",
		want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar/baz", ContextParams: map[string]string{"": "cd"}}},
	{name: "several sorted params", in: "xdstp://foo/" + lt + "/bar?ab=cde&ba=edc&z=f",
		want: keying.URN{Authority: "foo", ResourceType: lt, ID: "bar", ContextParams: map[string]string{"ab": "cde", "ba": "edc", "z": "f"}}},

	// envoy DecodeSuccess: every reserved character escaped in every component.
	// Our canonical form escapes only what each component needs.
	{
		name: "escaped components",
		in:   "xdstp://x9%25%2F%3F%23y/" + lt + "/q%25%3A%3F%23%5B%5Dr//s?%25%23%5B%5D%26%3Dk=v%25%23%5B%5D%26%3Dw&m=%25%23%26%3D",
		want: keying.URN{
			Authority: "x9%/?#y", ResourceType: lt, ID: "q%:?#[]r//s",
			ContextParams: map[string]string{"%#[]&=k": "v%#[]&=w", "m": "%#&="},
		},
		wantStr: "xdstp://x9%25%2F%3F%23y/" + lt + "/q%25:%3F%23[]r//s?%25%23[]%26%3Dk=v%25%23[]%26=w&m=%25%23%26=",
	},
	// envoy PathDividerEscape: an escaped '/' in the id is just a '/'.
	{name: "escaped slash in id", in: "xdstp:///type/foo%2Fbar/baz",
		want: keying.URN{ResourceType: "type", ID: "foo/bar/baz"}, wantStr: "xdstp:///type/foo/bar/baz"},

	// grpc-go name_test.go.
	{name: "grpc: no authority", in: "xdstp:///type/id", want: keying.URN{ResourceType: "type", ID: "id"}},
	{name: "grpc: ctx params", in: "xdstp://auth/type/id?a=1&b=2",
		want: keying.URN{Authority: "auth", ResourceType: "type", ID: "id", ContextParams: map[string]string{"a": "1", "b": "2"}}},
	{name: "grpc: ctx params sorted by key", in: "xdstp://auth/type/id?b=2&a=1",
		want:    keying.URN{Authority: "auth", ResourceType: "type", ID: "id", ContextParams: map[string]string{"a": "1", "b": "2"}},
		wantStr: "xdstp://auth/type/id?a=1&b=2"},
	// grpc-go calls this a legacy name; envoy (and we) read "id" as the type.
	{name: "one path segment is the type", in: "xdstp://auth/id", want: keying.URN{Authority: "auth", ResourceType: "id"}},
	{name: "grpc: old style name", in: "test-resource", wantErr: keying.ErrNotXDSTP},
	{name: "grpc: not a url", in: "a:/b/c", wantErr: keying.ErrNotXDSTP},

	// Our decisions.
	{name: "trailing slash is an empty id", in: "xdstp://a/T/", want: keying.URN{Authority: "a", ResourceType: "T"}, wantStr: "xdstp://a/T"},
	{name: "id with trailing slash", in: "xdstp://a/T/d/", want: keying.URN{Authority: "a", ResourceType: "T", ID: "d/"}},
	{name: "id with leading slash", in: "xdstp://a/T//d", want: keying.URN{Authority: "a", ResourceType: "T", ID: "/d"}},
	{name: "bare question mark", in: "xdstp://a/T/x?", want: keying.URN{Authority: "a", ResourceType: "T", ID: "x"}, wantStr: "xdstp://a/T/x"},
	{name: "empty param segments", in: "xdstp://a/T/x?&b=2&&a=1&",
		want:    keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"a": "1", "b": "2"}},
		wantStr: "xdstp://a/T/x?a=1&b=2"},
	{name: "only empty segments", in: "xdstp://a/T/x?&&", want: keying.URN{Authority: "a", ResourceType: "T", ID: "x"}, wantStr: "xdstp://a/T/x"},
	{name: "key without value", in: "xdstp://a/T/x?k",
		want: keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"k": ""}}, wantStr: "xdstp://a/T/x?k="},
	{name: "duplicate key: first wins", in: "xdstp://a/T/x?k=1&j=0&k=2",
		want:    keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"j": "0", "k": "1"}},
		wantStr: "xdstp://a/T/x?j=0&k=1"},
	{name: "duplicate key after decoding", in: "xdstp://a/T/x?k=1&%6B=2",
		want:    keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"k": "1"}},
		wantStr: "xdstp://a/T/x?k=1"},
	{name: "equals sign in value", in: "xdstp://a/T/x?k=v=w",
		want: keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"k": "v=w"}}},
	{name: "plus is literal", in: "xdstp://a/T/x?k=v+w",
		want: keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"k": "v+w"}}},
	{name: "question mark in query", in: "xdstp://a/T/x?k=v?w",
		want: keying.URN{Authority: "a", ResourceType: "T", ID: "x", ContextParams: map[string]string{"k": "v?w"}}},
	{name: "redundant escapes decoded", in: "xdstp://%61uth/%54/%69d%3a1?%6B=%76",
		want:    keying.URN{Authority: "auth", ResourceType: "T", ID: "id:1", ContextParams: map[string]string{"k": "v"}},
		wantStr: "xdstp://auth/T/id:1?k=v"},
	{name: "lower-case hex upper-cased", in: "xdstp://a/T/100%25%3f",
		want: keying.URN{Authority: "a", ResourceType: "T", ID: "100%?"}, wantStr: "xdstp://a/T/100%25%3F"},
	{name: "escaped slash in type", in: "xdstp://a/x%2Fy/z", want: keying.URN{Authority: "a", ResourceType: "x/y", ID: "z"}},
	{name: "raw bytes kept", in: "xdstp://a@b:1/T/h\u00e9llo w\x00rld[1]?k=\xff",
		want: keying.URN{Authority: "a@b:1", ResourceType: "T", ID: "h\u00e9llo w\x00rld[1]", ContextParams: map[string]string{"k": "\xff"}}},
	{name: "server listener name", in: "xdstp://auth/" + lt + "/grpc/server?xds.resource.listening_address=[::1]:8080",
		want: keying.URN{Authority: "auth", ResourceType: lt, ID: "grpc/server", ContextParams: map[string]string{"xds.resource.listening_address": "[::1]:8080"}}},

	// Errors.
	{name: "envoy: other scheme", in: "foo://", wantErr: keying.ErrNotXDSTP},
	{name: "upper-case scheme is a legacy name", in: "XDSTP://a/T/x", wantErr: keying.ErrNotXDSTP},
	{name: "empty name", in: "", wantErr: keying.ErrNotXDSTP},
	{name: "envoy: no resource type", in: "xdstp://foo", wantErr: keying.ErrMalformed},
	{name: "no slashes", in: "xdstp:foo/T/x", wantErr: keying.ErrMalformed},
	{name: "scheme only", in: "xdstp://", wantErr: keying.ErrMalformed},
	{name: "empty resource type", in: "xdstp://a//x", wantErr: keying.ErrMalformed},
	{name: "query before path", in: "xdstp://a?k=v/T/x", wantErr: keying.ErrMalformed},
	{name: "bad escape", in: "xdstp://a/T/x%zz", wantErr: keying.ErrMalformed},
	{name: "short escape", in: "xdstp://a/T/x%4", wantErr: keying.ErrMalformed},
	{name: "trailing percent", in: "xdstp://a/T/x?k=%", wantErr: keying.ErrMalformed},
	{name: "bad escape in authority", in: "xdstp://%g0/T/x", wantErr: keying.ErrMalformed},
	{name: "bad escape in key", in: "xdstp://a/T/x?%=1", wantErr: keying.ErrMalformed},
	{name: "envoy: unknown directive", in: "xdstp://foo/some-type#bar=baz", wantErr: keying.ErrMalformed},
	{name: "directive is not a URN", in: "xdstp://a/T/x#entry=y", wantErr: keying.ErrNotURN},
	{name: "glob is not a URN", in: "xdstp://a/T/foo/*", wantErr: keying.ErrNotURN},
	{name: "top glob is not a URN", in: "xdstp://a/T/*?k=v", wantErr: keying.ErrNotURN},
}

func TestParseURN(t *testing.T) {
	for _, tt := range urnTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keying.ParseURN(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseURN(%q) error = %v, want %v", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURN(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseURN(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			wantStr := tt.wantStr
			if wantStr == "" {
				wantStr = tt.in
			}
			if s := got.String(); s != wantStr {
				t.Errorf("String() = %q, want %q", s, wantStr)
			}
			again, err := keying.ParseURN(got.String())
			if err != nil {
				t.Fatalf("ParseURN(String()): %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("ParseURN(String()) mismatch (-first +second):\n%s", diff)
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	// envoy's EscapedUrlWithManyQueryParamsAndDirectives, shortened: an entry
	// with every reserved character, and an alt whose own fragment holds a
	// further alt and an entry (double-escaped).
	const manyDirectives = "xdstp://f%25o/" + lt + "/b?k=v" +
		"#entry=en%25%23%5B%5D%2Ctry,alt=xdstp://fo%2525%252F%253F%2523o/bar%23alt=xdstp://bar/baz%2Centry=h%2525%2523%255B%255D%252Cuh"
	tests := []struct {
		name    string
		in      string
		want    keying.URL
		wantStr string
		wantErr error
	}{
		{
			name: "envoy: entry", in: "xdstp://foo/bar/baz/blah?a=b#entry=m",
			want: keying.URL{
				URN:        keying.URN{Authority: "foo", ResourceType: "bar", ID: "baz/blah", ContextParams: map[string]string{"a": "b"}},
				Directives: []keying.Directive{{Entry: "m"}},
			},
		},
		{
			name: "envoy: nested directives", in: manyDirectives,
			want: keying.URL{
				URN: keying.URN{Authority: "f%o", ResourceType: lt, ID: "b", ContextParams: map[string]string{"k": "v"}},
				Directives: []keying.Directive{
					{Entry: "en%#[],try"},
					{Alt: &keying.URL{
						URN: keying.URN{Authority: "fo%/?#o", ResourceType: "bar"},
						Directives: []keying.Directive{
							{Alt: &keying.URL{URN: keying.URN{Authority: "bar", ResourceType: "baz"}}},
							{Entry: "h%#[],uh"},
						},
					}},
				},
			},
			wantStr: "xdstp://f%25o/" + lt + "/b?k=v" +
				"#entry=en%25%23[]%2Ctry,alt=xdstp://fo%2525%252F%253F%2523o/bar%23alt=xdstp://bar/baz%2Centry=h%2525%2523[]%252Cuh",
		},
		{
			name: "TP1 alt", in: "xdstp://gcp/envoy.config.endpoint.v3.ClusterLoadAssignment/foo#alt=xdstp://onprem/envoy.config.endpoint.v3.ClusterLoadAssignment/bar",
			want: keying.URL{
				URN: keying.URN{Authority: "gcp", ResourceType: "envoy.config.endpoint.v3.ClusterLoadAssignment", ID: "foo"},
				Directives: []keying.Directive{{Alt: &keying.URL{
					URN: keying.URN{Authority: "onprem", ResourceType: "envoy.config.endpoint.v3.ClusterLoadAssignment", ID: "bar"},
				}}},
			},
		},
		{
			name: "glob", in: "xdstp://auth/" + lt + "/foo/*?y=2&x=1",
			want:    keying.URL{URN: keying.URN{Authority: "auth", ResourceType: lt, ID: "foo/*", ContextParams: map[string]string{"x": "1", "y": "2"}}},
			wantStr: "xdstp://auth/" + lt + "/foo/*?x=1&y=2",
		},
		{name: "plain URN", in: "xdstp://a/T/x", want: keying.URL{URN: keying.URN{Authority: "a", ResourceType: "T", ID: "x"}}},
		{name: "empty fragment", in: "xdstp://a/T/x#", wantErr: keying.ErrMalformed},
		{name: "empty directive", in: "xdstp://a/T/x#entry=y,", wantErr: keying.ErrMalformed},
		{name: "empty entry", in: "xdstp://a/T/x#entry=", wantErr: keying.ErrMalformed},
		{name: "bad alt", in: "xdstp://a/T/x#alt=http://b/T/y", wantErr: keying.ErrMalformed},
		{name: "bad escape in directive", in: "xdstp://a/T/x#entry=%", wantErr: keying.ErrMalformed},
		{name: "legacy", in: "foo", wantErr: keying.ErrNotXDSTP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keying.ParseURL(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseURL(%q) error = %v, want %v", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseURL(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			wantStr := tt.wantStr
			if wantStr == "" {
				wantStr = tt.in
			}
			if s := got.String(); s != wantStr {
				t.Errorf("String() = %q, want %q", s, wantStr)
			}
			again, err := keying.ParseURL(got.String())
			if err != nil {
				t.Fatalf("ParseURL(String()): %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("ParseURL(String()) mismatch (-first +second):\n%s", diff)
			}
		})
	}
}

func TestParseURLAltDepth(t *testing.T) {
	nested := func(n int) string {
		u := keying.URL{URN: keying.URN{Authority: "a", ResourceType: "T", ID: "x"}}
		for range n {
			inner := u
			u = keying.URL{URN: inner.URN, Directives: []keying.Directive{{Alt: &inner}}}
		}
		return u.String()
	}
	if _, err := keying.ParseURL(nested(4)); err != nil {
		t.Errorf("ParseURL(4 nested alts): %v", err)
	}
	if _, err := keying.ParseURL(nested(12)); !errors.Is(err, keying.ErrMalformed) {
		t.Errorf("ParseURL(12 nested alts) error = %v, want ErrMalformed", err)
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  error
	}{
		{in: "", want: ""},
		{in: "*", want: "*"},
		{in: "outbound|443||svc.example", want: "outbound|443||svc.example"},
		{in: "XDSTP://A/T/x?b=1&a=2", want: "XDSTP://A/T/x?b=1&a=2"},
		{in: "xdstp://a/T/x", want: "xdstp://a/T/x"},
		{in: "xdstp://a/T/x?a=1&b=2", want: "xdstp://a/T/x?a=1&b=2"},
		{in: "xdstp://a/T/x?b=2&a=1", want: "xdstp://a/T/x?a=1&b=2"},
		{in: "xdstp://a/T/x?a=1&a=2", want: "xdstp://a/T/x?a=1"},
		{in: "xdstp://a/T/x?a=1&", want: "xdstp://a/T/x?a=1"},
		{in: "xdstp://a/T/x?", want: "xdstp://a/T/x"},
		{in: "xdstp://a/T/", want: "xdstp://a/T"},
		{in: "xdstp://a/T/x%2fy", want: "xdstp://a/T/x/y"},
		{in: "xdstp://a/T/x%3f", want: "xdstp://a/T/x%3F"},
		{in: "xdstp://a/T/x%3F", want: "xdstp://a/T/x%3F"},
		{in: "xdstp://a/T/foo/*?y=2&x=1", want: "xdstp://a/T/foo/*?x=1&y=2"},
		{in: "xdstp://a/T/foo/%2A", want: "xdstp://a/T/foo/*"},
		{in: "xdstp://a/T/x#entry=y", wantErr: keying.ErrNotURN},
		{in: "xdstp://a", wantErr: keying.ErrMalformed},
		{in: "xdstp:a/T/x", wantErr: keying.ErrMalformed},
		{in: "xdstp://a/T/%", wantErr: keying.ErrMalformed},
	}
	for _, tt := range tests {
		got, err := keying.Canonical(tt.in)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Canonical(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		if again, err := keying.Canonical(got); err != nil || again != got {
			t.Errorf("Canonical(%q) = %q, %v; not idempotent", got, again, err)
		}
	}
}

func TestCanonicalVectors(t *testing.T) {
	// Canonical agrees with ParseURN + String on every URN vector.
	for _, tt := range urnTests {
		if tt.wantErr != nil {
			continue
		}
		want := tt.wantStr
		if want == "" {
			want = tt.in
		}
		if got, err := keying.Canonical(tt.in); err != nil || got != want {
			t.Errorf("%s: Canonical(%q) = %q, %v; want %q", tt.name, tt.in, got, err, want)
		}
	}
}

func TestEqual(t *testing.T) {
	a := keying.URN{Authority: "a", ResourceType: "T", ID: "x"}
	b := a
	b.ContextParams = map[string]string{}
	if !a.Equal(b) {
		t.Errorf("nil and empty context params differ")
	}
	b.ContextParams = map[string]string{"k": ""}
	if a.Equal(b) {
		t.Errorf("%v equals %v", a, b)
	}
	x, _ := keying.ParseURN("xdstp://a/T/x?k=1&j=2")
	y, _ := keying.ParseURN("xdstp://a/T/x?j=2&k=1")
	if !x.Equal(y) {
		t.Errorf("param order matters: %v != %v", x, y)
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{"xdstp://auth/" + lt + "/foo/*?x=y", "xdstp://auth/" + lt + "/foo/bar?x=y", true},
		{"xdstp://auth/" + lt + "/foo/*?x=y", "xdstp://auth/" + lt + "/foo/bar", false},          // TP1: params must match
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foo/bar?x=y", false},          // extra param
		{"xdstp://auth/" + lt + "/foo/*?x=y", "xdstp://auth/" + lt + "/foo/bar?x=z", false},      // other value
		{"xdstp://auth/" + lt + "/foo/*?x=y&z=1", "xdstp://auth/" + lt + "/foo/b?z=1&x=y", true}, // as a set
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foo/bar/baz", false},          // direct children only
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foo", false},
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foobar", false},
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foo/", true}, // empty last segment, as envoy
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://other/" + lt + "/foo/bar", false},
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/T/foo/bar", false},
		{"xdstp://auth/" + lt + "/foo/*", "xdstp://auth/" + lt + "/foo/*", false}, // a glob is not a name
		{"xdstp://auth/" + lt + "/*", "xdstp://auth/" + lt + "/bar", true},
		{"xdstp://auth/" + lt + "/*", "xdstp://auth/" + lt, true},
		{"xdstp://auth/" + lt + "/*", "xdstp://auth/" + lt + "/a/b", false},
		{"xdstp://auth/" + lt + "/foo", "xdstp://auth/" + lt + "/foo", false}, // not a glob
		{"xdstp:///" + lt + "/a%2F*", "xdstp:///" + lt + "/a/b", true},        // decoded before matching
	}
	for _, tt := range tests {
		g, err := keying.ParseURL(tt.glob)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", tt.glob, err)
		}
		n, err := keying.ParseURL(tt.name)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", tt.name, err)
		}
		if got := g.Matches(n.URN); got != tt.want {
			t.Errorf("%q.Matches(%q) = %v, want %v", tt.glob, tt.name, got, tt.want)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct{ name, want string }{
		{"xdstp://a/T/foo/bar?x=y", "xdstp://a/T/foo/*?x=y"},
		{"xdstp://a/T/bar", "xdstp://a/T/*"},
		{"xdstp://a/T", "xdstp://a/T/*"},
		{"xdstp://a/T/foo/", "xdstp://a/T/foo/*"},
		{"xdstp://a/T/x/y/z", "xdstp://a/T/x/y/*"},
	}
	for _, tt := range tests {
		u, err := keying.ParseURN(tt.name)
		if err != nil {
			t.Fatalf("ParseURN(%q): %v", tt.name, err)
		}
		g := u.Glob()
		if got := g.String(); got != tt.want {
			t.Errorf("ParseURN(%q).Glob() = %q, want %q", tt.name, got, tt.want)
		}
		if !g.Matches(u) {
			t.Errorf("%q does not match %q", g, tt.name)
		}
	}
}

func TestIsGlob(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"xdstp://a/T/foo/*", true},
		{"xdstp://a/T/foo/*?x=y#entry=e", true},
		{"xdstp://a/T/*", true},
		{"xdstp://a/T/foo/%2a", true},
		{"xdstp://a/*", false}, // "*" is the type here
		{"xdstp://a/T/foo*", false},
		{"xdstp://a/T/foo/*/bar", false},
		{"*", false},
		{"foo/*", false},
		{"xdstp://a/T/%/*", false},
		{"xdstp://a/T/foo/*?k=v", true},
		{"xdstp://a/T/%2A", true},
		{"xdstp://a/T/foo%2F*", true},
		{"xdstp://a/T/*#alt=xdstp://b/T/*", true},
		{"xdstp://a/T/foo/*%3F", false},
		{"xdstp:a/T/*", false},
		{"XDSTP://a/T/*", false},
		{"xdstp://a/T/foo/*x?k=/*?", false},
	}
	for _, tt := range tests {
		if got := keying.IsGlob(tt.name); got != tt.want {
			t.Errorf("IsGlob(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAuthority(t *testing.T) {
	tests := []struct {
		name   string
		want   string
		wantOK bool
	}{
		{"foo", "", false},
		{"xdstp:foo", "", false},
		{"xdstp:///T/x", "", true},
		{"xdstp://auth.example/T/x", "auth.example", true},
		{"xdstp://auth%2Eexample/T/x", "auth.example", true},
		{"xdstp://a%2Fb/T/x", "a/b", true},
		{"xdstp://auth?k=v", "auth", true},
		{"xdstp://auth#entry=e", "auth", true},
		{"xdstp://auth", "auth", true},
		{"xdstp://a%zz/T/x", "a%zz", true},
	}
	for _, tt := range tests {
		got, ok := keying.Authority(tt.name)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Authority(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	for _, bm := range []struct{ name, in string }{
		{"legacy", "outbound|8080||reviews.default.svc.cluster.local"},
		{"canonical", "xdstp://td.example.com/envoy.config.cluster.v3.Cluster/reviews/v1?env=prod&xds.node.locality.zone=us-east1-b"},
		{"unsorted", "xdstp://td.example.com/envoy.config.cluster.v3.Cluster/reviews/v1?xds.node.locality.zone=us-east1-b&env=prod"},
		{"escaped", "xdstp://td.example.com/envoy.config.cluster.v3.Cluster/reviews%2Fv1?env=prod&xds.node.locality.zone=us-east1-b"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := keying.Canonical(bm.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
