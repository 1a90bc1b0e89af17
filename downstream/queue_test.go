package downstream

import (
	"math/rand/v2"
	"testing"
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
