package relay

import (
	"testing"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
)

// idWatcher is a Watcher known only by its id.
type idWatcher uint64

func (idWatcher) Notify(*downstream.View, []string)                        {}
func (idWatcher) NotifyRollout(*downstream.View, downstream.Rollout, bool) {}
func (idWatcher) Wake()                                                    {}
func (w idWatcher) ID() uint64                                             { return uint64(w) }

// A canary's verdict on a View older than the latest version of its rollout
// meant for it is not about that version: a newer version that joined the
// rollout may still be on its way to the canary in the fan-out, and a NACK
// of the older one must not halt it (the oracle: the halt marked the
// upstream's fix as halted and the relay served the older version for good).
func TestVerdictOnAnOlderViewIsNotAboutTheRollout(t *testing.T) {
	a, b := idWatcher(1), idWatcher(2)
	tc := &typeCache{watchers: map[string]*watcherSet{"c9": {}}}
	tc.watchers["c9"].add(uint64(a))
	res := func(version string) *downstream.View {
		return &downstream.View{Resources: map[string]*downstream.Resource{"c9": {Name: "c9", Version: version}}}
	}
	old, bad, fix := res("1"), res("bad"), res("fix")
	bad.Seq, fix.Seq = 5, 7
	r := &Relay{parts: &parts{cfg: &config.Config{Rollout: &config.Rollout{MaxNACKRatio: 0}}}}
	ro := &rollout{r: r, tc: tc, canaries: map[downstream.Watcher]string{a: "a", b: "b"},
		names: map[string]string{}, accepted: map[string]*downstream.Resource{}, acks: map[downstream.Watcher]bool{},
		nacks: map[downstream.Watcher]string{}, blamed: map[downstream.Watcher][]string{},
		want: map[downstream.Watcher]uint64{a: 5, b: 5}}
	ro.add(old, bad, []string{"c9"})
	ro.add(bad, fix, []string{"c9"}) // the fix joins: only a watches c9
	if ro.want[a] != 7 || ro.want[b] != 5 {
		t.Fatalf("want %v: the fix goes to a only", ro.want)
	}
	ro.Report(a, true, "bad version", nil, 5)
	if len(ro.nacks) != 0 {
		t.Fatal("a NACK of the older View judged the rollout while the fix was on its way to the canary")
	}
	ro.Report(b, false, "", nil, 5)
	if !ro.acks[b] {
		t.Fatal("the verdict of a canary the fix does not go to was not counted")
	}
}
