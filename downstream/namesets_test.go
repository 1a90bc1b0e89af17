package downstream

import (
	"reflect"
	"testing"
)

func set(names ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

func TestNameSetsShareEqualSubscriptions(t *testing.T) {
	var s nameSets
	var a, b, c *nameSet
	ma := s.intern(&a, set("x", "y"))
	mb := s.intern(&b, set("y", "x"))
	if reflect.ValueOf(ma).Pointer() != reflect.ValueOf(mb).Pointer() || a != b || a.refs != 2 {
		t.Fatalf("equal subscriptions not shared: %p %p refs %d", ma, mb, a.refs)
	}
	// Names are arbitrary bytes: a name holding what a separator would be
	// is another set.
	s.intern(&c, set("x\x00\x00y"))
	if c == a {
		t.Fatal("different subscriptions share a set")
	}
	// A new subscription releases the old one; the last release forgets it.
	s.intern(&a, set("x"))
	if b.refs != 1 || len(s.m) != 3 {
		t.Fatalf("after a change: refs %d, %d sets", b.refs, len(s.m))
	}
	s.release(b)
	s.release(c)
	s.release(a)
	if len(s.m) != 0 {
		t.Fatalf("sets kept after every release: %v", s.m)
	}
}
