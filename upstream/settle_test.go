package upstream_test

import (
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"slices"
	"testing"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// A wildcard added to a stream that already subscribed by name is proven by
// a response that carries an unnamed resource; when the named resources are
// all there is, no response can prove it, and it settles after the server
// said nothing more. No update before that claims the full set.
func TestWildcardAddedMidStream(t *testing.T) {
	for _, mode := range []upstream.Mode{upstream.ModeSotW, upstream.ModeDelta} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				upstream []string
				settled  bool
			}{
				{"proven", []string{"a", "b"}, false},
				{"settled", []string{"a"}, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					cp := startControlPlane(t, false)
					var rs []types.Resource
					for _, n := range tc.upstream {
						rs = append(rs, cluster(n))
					}
					cp.set(t, keying.ClusterType, rs...)
					rec := &recorder{}
					c := newClient(t, mode, rec, cp.addr)
					c.Subscribe(keying.ClusterType, "a")
					cur := 0
					if u := rec.nextUpdate(t, &cur, keying.ClusterType); u.Complete {
						t.Fatalf("a named subscription's update claims the full set: %+v", u)
					}
					c.Subscribe(keying.ClusterType, keying.Wildcard)
					for {
						u := rec.nextUpdate(t, &cur, keying.ClusterType)
						if !u.Complete {
							if slices.ContainsFunc(names(u), func(n string) bool { return n != "a" }) {
								t.Fatalf("an unnamed resource did not complete the wildcard: %+v", u)
							}
							continue
						}
						if u.Settled != tc.settled {
							t.Fatalf("complete update settled=%v, want %v: %+v", u.Settled, tc.settled, u)
						}
						break
					}
				})
			}
		})
	}
}
