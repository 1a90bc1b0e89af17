package upstream

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/keying"
)

type recordingHandler struct{ got []Update }

func (h *recordingHandler) OnUpdate(u Update) error     { h.got = append(h.got, u); return nil }
func (h *recordingHandler) OnState(string, bool, error) {}

// The relay hears canonical names only; a removal of a spelling of a name
// the same response sends is no removal of the resource.
func TestCanonicalHandler(t *testing.T) {
	const (
		xEnvoy = "xdstp://a/T/x%3A1"
		x      = "xdstp://a/T/x:1"
		yEnvoy = "xdstp://a/T/y%3A1"
		y      = "xdstp://a/T/y:1"
	)
	rec := &recordingHandler{}
	in := Update{Resources: []Resource{{Name: xEnvoy}, {Name: "c0"}}, Removed: []string{x, yEnvoy},
		Keys: map[string]struct{}{yEnvoy: {}}, Errors: []ResourceError{{Name: yEnvoy}}}
	if err := (canonicalHandler{rec}).OnUpdate(in); err != nil {
		t.Fatal(err)
	}
	got := rec.got[0]
	want := Update{Resources: []Resource{{Name: x, Spelling: xEnvoy}, {Name: "c0"}}, Removed: []string{y},
		Keys: map[string]struct{}{y: {}}, Errors: []ResourceError{{Name: y}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("update (-want +got):\n%s", d)
	}
	if in.Resources[0].Name != xEnvoy || in.Removed[1] != yEnvoy {
		t.Fatal("the caller's update was changed")
	}
}

// The client subscribes names as spelled and maps the relay's canonical
// names back to the spelling.
func TestSpelledSubscription(t *testing.T) {
	st := &typeState{names: map[string]struct{}{}}
	st.spellLocked("xdstp://a/T/x%3A1")
	if got := st.spelling("xdstp://a/T/x:1"); got != "xdstp://a/T/x%3A1" {
		t.Fatalf("spelling = %q", got)
	}
	if got := st.spelledVersions(map[string]string{"xdstp://a/T/x:1": "v1", "c0": "v2"}); got["xdstp://a/T/x%3A1"] != "v1" || got["c0"] != "v2" {
		t.Fatalf("versions = %v", got)
	}
	// A TP2 key: its name spelled, its parameters kept.
	st.spellLocked(keying.SubscriptionKey("xdstp://a/T/y%3A1", "env=prod"))
	if got := st.spelling(keying.SubscriptionKey("xdstp://a/T/y:1", "env=prod")); got != keying.SubscriptionKey("xdstp://a/T/y%3A1", "env=prod") {
		t.Fatalf("spelling of a key = %q", got)
	}
	st.spellLocked("xdstp://a/T/x:1") // subscribed canonically again
	if got := st.spelling("xdstp://a/T/x:1"); got != "xdstp://a/T/x:1" {
		t.Fatalf("spelling after a canonical subscription = %q", got)
	}
}
