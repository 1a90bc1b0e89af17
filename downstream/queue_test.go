package downstream

import (
	"math/rand/v2"
	"testing"

	"github.com/xds-relay/xds-relay/keying"
)

// Property: whatever the interleaving of changes across types, a stream's
// queue delivers them in the order they were produced: a change of one type
// is never delivered after a later change of another type. Merging only
// joins a change with the one right before it of the same type.
func TestQueueNeverReordersAcrossTypes(t *testing.T) {
	types := []string{"L", "R", "C", "E"}
	for round := range 2000 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		var q queue
		type push struct {
			typ string
			seq uint64
		}
		var pushes []push
		coveredBy := map[uint64]int{} // push seq → index of the item that delivered it
		lastDelivered := map[string]uint64{}
		popped := 0
		pop := func() {
			it, ok := q.pop()
			if !ok {
				return
			}
			for _, p := range pushes {
				if p.typ == it.view.TypeURL && p.seq > lastDelivered[p.typ] && p.seq <= it.view.Seq {
					coveredBy[p.seq] = popped
				}
			}
			lastDelivered[it.view.TypeURL] = it.view.Seq
			popped++
		}
		var seq uint64
		for range rng.IntN(maxQueue / 2) {
			if rng.IntN(3) == 0 {
				pop()
				continue
			}
			seq++
			typ := types[rng.IntN(len(types))]
			q.push(&View{TypeURL: typ, Seq: seq, Changed: map[string]struct{}{"x": {}}}, nil)
			pushes = append(pushes, push{typ, seq})
		}
		for q.len() > 0 {
			pop()
		}
		for i, a := range pushes {
			ia, ok := coveredBy[a.seq]
			if !ok {
				t.Fatalf("round %d: change %d (%s) never delivered", round, a.seq, a.typ)
			}
			for _, b := range pushes[i+1:] {
				if b.typ != a.typ && coveredBy[b.seq] < ia {
					t.Fatalf("round %d: %s change %d delivered after the later %s change %d", round, a.typ, a.seq, b.typ, b.seq)
				}
			}
		}
	}
}

// A stalled stream's queue stays bounded however many changes it misses.
func TestQueueBounded(t *testing.T) {
	var q queue
	types := []string{"L", "R", "C", "E"}
	for i := range 10000 {
		q.push(&View{TypeURL: types[i%len(types)], Seq: uint64(i + 1)}, nil)
		if q.len() > maxQueue {
			t.Fatalf("queue grew to %d", q.len())
		}
	}
	seen := map[string]uint64{}
	for q.len() > 0 {
		it, _ := q.pop()
		seen[it.view.TypeURL] = it.view.Seq
	}
	for i, typ := range types {
		if want := uint64(10000 - len(types) + i + 1); seen[typ] != want {
			t.Fatalf("type %s ended at view %d, want the latest %d", typ, seen[typ], want)
		}
	}
}

// Property, past maxQueue: a stalled stream's backlog collapses to one item
// per type, and still every change is delivered, a type's Views never go
// back, each type ends at its latest View, and no change goes out after a
// later change of a type that needs it (xDS order: CDS before EDS before LDS
// before RDS): [CDS, EDS, LDS, CDS] must not become [EDS, LDS, CDS], a
// Listener before the Cluster it needs. (Removals that the reordering sends
// early are held back by the stream while the client refers to them: mbb.go.)
func TestQueueCollapseKeepsXDSOrder(t *testing.T) {
	types := []string{keying.ListenerType, keying.RouteType, keying.ClusterType, keying.EndpointType}
	for round := range 500 {
		rng := rand.New(rand.NewPCG(uint64(round), 11))
		var q queue
		type push struct {
			typ string
			seq uint64
		}
		var pushes []push
		delivered := map[uint64]int{} // push seq → index of the item that delivered it
		last := map[string]uint64{}
		popped := 0
		pop := func() {
			it, ok := q.pop()
			if !ok {
				return
			}
			typ := it.view.TypeURL
			if it.view.Seq <= last[typ] {
				t.Fatalf("round %d: %s went back from view %d to %d", round, typ, last[typ], it.view.Seq)
			}
			for _, p := range pushes {
				if p.typ == typ && p.seq > last[typ] && p.seq <= it.view.Seq {
					delivered[p.seq] = popped
				}
			}
			last[typ] = it.view.Seq
			popped++
		}
		var seq uint64
		for range 3*maxQueue + rng.IntN(3*maxQueue) {
			if rng.IntN(8) == 0 {
				pop()
				continue
			}
			seq++
			typ := types[rng.IntN(len(types))]
			q.push(&View{TypeURL: typ, Seq: seq, Changed: map[string]struct{}{"x": {}}}, nil)
			pushes = append(pushes, push{typ, seq})
			if q.len() > maxQueue {
				t.Fatalf("round %d: queue grew to %d", round, q.len())
			}
		}
		for q.len() > 0 {
			pop()
		}
		latest := map[string]uint64{}
		for i, a := range pushes {
			latest[a.typ] = a.seq
			da, ok := delivered[a.seq]
			if !ok {
				t.Fatalf("round %d: change %d (%s) never delivered", round, a.seq, a.typ)
			}
			for _, b := range pushes[i+1:] {
				if keying.OrderRank(a.typ) < keying.OrderRank(b.typ) && delivered[b.seq] < da {
					t.Fatalf("round %d: %s change %d delivered after the later %s change %d that needs it",
						round, a.typ, a.seq, b.typ, b.seq)
				}
			}
		}
		for typ, s := range latest {
			if last[typ] != s {
				t.Fatalf("round %d: %s ended at view %d, want the latest %d", round, typ, last[typ], s)
			}
		}
	}
}

// A rollout barrier stays in place when the queue collapses, and the queue
// stays bounded behind it.
func TestQueueBoundedBehindBarrier(t *testing.T) {
	var q queue
	types := []string{keying.ListenerType, keying.RouteType, keying.ClusterType, keying.EndpointType}
	q.push(&View{TypeURL: keying.ClusterType, Seq: 1}, nil)
	q.pushRollout(&View{TypeURL: keying.RouteType, Seq: 2}, pendingRollout{}, false)
	for i := range 10000 {
		q.push(&View{TypeURL: types[i%len(types)], Seq: uint64(i + 3)}, nil)
		if q.len() > maxQueue {
			t.Fatalf("queue grew to %d behind a barrier", q.len())
		}
	}
	if h := q.head(); h.view.Seq != 1 {
		t.Fatalf("head is view %d, want the change before the barrier", h.view.Seq)
	}
	q.pop()
	if h := q.head(); h.barrier == nil || h.view.Seq != 2 {
		t.Fatalf("the barrier moved: head %+v", h)
	}
}

// pendingRollout is a Rollout that never resolves.
type pendingRollout struct{}

func (pendingRollout) State() RolloutState                            { return RolloutPending }
func (pendingRollout) Wait(Watcher) bool                              { return true }
func (pendingRollout) Report(Watcher, bool, string, []string, uint64) {}
func (pendingRollout) Covers(*View) bool                              { return false }
func (pendingRollout) Revert(v *View) *View                           { return v }
func (pendingRollout) Names() []string                                { return nil }

// Views of one type can come from different scopes of the relay (a
// do_not_cache type moves from the shared scope to the node's own, whose
// numbering once restarted): a merge keeps the View pushed last, never the
// one with the larger number.
func TestQueueMergeKeepsLaterView(t *testing.T) {
	var q queue
	group := &View{TypeURL: keying.ClusterType, Seq: 100, Changed: map[string]struct{}{"a": {}}}
	own := &View{TypeURL: keying.ClusterType, Seq: 3, Changed: map[string]struct{}{"b": {}}}
	q.push(group, nil)
	q.push(own, nil)
	it, _ := q.pop()
	if it.view != own {
		t.Fatalf("merged item holds view %d, want the later-pushed own-scope view", it.view.Seq)
	}
	if _, ok := it.names["a"]; !ok {
		t.Fatal("the merge lost the earlier change's names")
	}
}

// resolvedRollout is a Rollout that has resolved: released or halted.
type resolvedRollout struct {
	pendingRollout
	state RolloutState
}

func (r resolvedRollout) State() RolloutState { return r.state }

// A stalled stream's queue stays bounded however many rollouts come and go:
// barriers whose rollout resolved collapse with the rest, a released one as
// an ordinary change, a halted one as a change to skip (item.halted) merged
// into its type's latest View; pending barriers stay in place.
func TestQueueBoundedAcrossResolvedBarriers(t *testing.T) {
	var q queue
	seq := uint64(0)
	for i := range 50 * maxQueue {
		seq++
		state := RolloutReleased
		if i%3 == 0 {
			state = RolloutHalted
		}
		q.pushRollout(&View{TypeURL: keying.ClusterType, Seq: seq, Changed: map[string]struct{}{"c": {}}},
			resolvedRollout{state: state}, false)
		seq++
		q.push(&View{TypeURL: keying.RouteType, Seq: seq, Changed: map[string]struct{}{"r": {}}}, nil)
	}
	if q.len() > maxQueue {
		t.Fatalf("queue holds %d items, more than %d", q.len(), maxQueue)
	}
	halted := 0
	for _, it := range q.items {
		halted += len(it.halted)
	}
	if halted == 0 {
		t.Fatal("the halted rollouts were lost in the collapse: their change would be sent")
	}
	seq++
	q.pushRollout(&View{TypeURL: keying.ClusterType, Seq: seq}, pendingRollout{}, false)
	for range 2 * maxQueue {
		seq++
		q.push(&View{TypeURL: keying.RouteType, Seq: seq, Changed: map[string]struct{}{"r": {}}}, nil)
	}
	pending := 0
	for _, it := range q.items {
		if it.barrier != nil {
			pending++
		}
	}
	if pending != 1 || q.len() > maxQueue {
		t.Fatalf("%d pending barriers in %d items, want 1 in at most %d", pending, q.len(), maxQueue)
	}
}
