package upstream

import (
	"maps"
	"testing"
)

// A Delta stream's first request declares what it subscribes to: the names,
// the members of its glob collections (so that the server says which of them
// went while the relay was away), or everything with the wildcard.
func TestInitialVersionsKeepWhatTheRequestSubscribes(t *testing.T) {
	const glob, m1, other = "xdstp://a/T/g/*", "xdstp://a/T/g/m1", "xdstp://a/T/h/m2"
	held := map[string]string{"c0": "1", "c1": "2", m1: "3", other: "4"}
	for _, tc := range []struct {
		names []string
		want  map[string]string
	}{
		{[]string{"c0"}, map[string]string{"c0": "1"}},
		{[]string{glob}, map[string]string{m1: "3"}},
		{[]string{"*"}, held},
	} {
		st := &typeState{names: map[string]struct{}{}}
		for _, n := range tc.names {
			st.names[n] = struct{}{}
		}
		if got := initialVersions(st, held); !maps.Equal(got, tc.want) {
			t.Errorf("subscribed %v: declared %v, want %v", tc.names, got, tc.want)
		}
	}
}
