package downstream

import (
	"slices"

	"github.com/xds-relay/xds-relay/keying"
)

// item is one pending change of one type for one stream.
type item struct {
	view *View
	// names are the names to consider: the View's Changed set (shared) or,
	// after a merge, a private union.
	names map[string]struct{}
	// force holds newly subscribed names that must be sent even when
	// unchanged; Wildcard ("*") forces the wildcard set.
	force map[string]struct{}
	// beats are names whose TTL the upstream refreshed (View.Heartbeats,
	// shared; a private union after a merge).
	beats map[string]struct{}
	// recheck: the stream queued the item itself to look at names again
	// (pushNames), even in a View it has looked at.
	recheck bool
	owned   bool // names is a private copy

	// barrier makes the item a barrier: it and everything behind it wait
	// until the rollout resolves (nil: no barrier).
	barrier Rollout
	// canary reports the verdict on this item's response to the rollout.
	canary Rollout
	// halted are halted rollouts whose barriers collapse merged into the
	// item: the stream sends the item reverted by them (see barrier).
	halted []Rollout
}

// maxQueue bounds a stream's queue. Past it the queue collapses to one item
// per type (see collapse), so a stalled client costs bounded memory.
const maxQueue = 64

// queue is a stream's ordered list of pending changes. Updates leave in the
// order the Source produced them across types; a newer change of one type
// merges into a queued one only when that one is the tail, so no other type's
// change lies between them.
type queue struct {
	items []item
}

func (q *queue) len() int { return len(q.items) }

// push appends the change v or merges it into the tail when the tail is of
// the same type. A push with force comes from a subscription change: only the
// forced names matter, not what changed in v.
func (q *queue) push(v *View, force []string) {
	changed := v.Changed
	if force != nil {
		changed = nil
	}
	if n := len(q.items); n > 0 && q.items[n-1].view.TypeURL == v.TypeURL && q.items[n-1].barrier == nil {
		q.items[n-1].merge(v, changed, v.Heartbeats, force)
		return
	}
	it := item{view: v, names: changed, beats: v.Heartbeats}
	it.addForce(force)
	q.append(it)
}

// pushRollout queues the change v of rollout r: a canary's item reports to
// r; anyone else's is a barrier carrying r's names, never merged.
func (q *queue) pushRollout(v *View, r Rollout, canary bool) {
	if canary {
		q.push(v, nil)
		tail := &q.items[len(q.items)-1]
		if tail.canary == nil {
			tail.canary = r
		}
		return
	}
	names := make(map[string]struct{}, len(v.Changed)+len(r.Names()))
	for n := range v.Changed {
		names[n] = struct{}{}
	}
	for _, n := range r.Names() {
		names[n] = struct{}{}
	}
	q.append(item{view: v, names: names, owned: true, barrier: r, beats: v.Heartbeats})
}

// pushNames queues v for names only (not what changed in v): a stream
// looks at them again.
func (q *queue) pushNames(v *View, names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	if n := len(q.items); n > 0 && q.items[n-1].view.TypeURL == v.TypeURL && q.items[n-1].barrier == nil {
		q.items[n-1].merge(v, set, nil, nil)
		q.items[n-1].recheck = true
		return
	}
	q.append(item{view: v, names: set, owned: true, recheck: true})
}

func (q *queue) append(it item) {
	q.items = append(q.items, it)
	if len(q.items) > maxQueue {
		q.collapse()
	}
}

// changes reports whether a queued change of typeURL concerns key (changed
// or newly subscribed); any change of the type for "".
func (q *queue) changes(typeURL, key string) bool {
	for _, it := range q.items {
		if it.view.TypeURL != typeURL {
			continue
		}
		_, changed := it.names[key]
		_, forced := it.force[key]
		if key == "" || changed || forced {
			return true
		}
	}
	return false
}

// head returns the first item without removing it.
func (q *queue) head() *item {
	if len(q.items) == 0 {
		return nil
	}
	return &q.items[0]
}

// pop removes and returns the head.
func (q *queue) pop() (item, bool) {
	if len(q.items) == 0 {
		return item{}, false
	}
	it := q.items[0]
	q.items[0] = item{}
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil // a slice of no capacity still holds its array
	}
	return it, true
}

// collapse bounds the queue of a stream that has fallen maxQueue changes
// behind: per run of items between pending rollout barriers (which stay in
// place), every type's items merge into one, and the merged items go out in
// the xDS order of types (keying.OrderRank: CDS, EDS, LDS, RDS, …; types of
// the same rank in the order of their last change). Such a client gets the
// latest state of each type. Merging two updates of one type across another
// type's update could send a removal before the update that stops
// referencing it; the stream's make-before-break holds (mbb.go) keep such a
// removal back until the reference is gone, so the order of the well-known
// types is safe; opaque types keep the upstream's order of last changes.
//
// A barrier whose rollout has resolved holds nothing back any more: a
// released one is an ordinary change, a halted one is sent reverted, which merged
// into its run means that the run's latest View of the type is sent
// reverted (item.halted). So barriers do not pile up either: a stream holds
// at most one per pending rollout.
func (q *queue) collapse() {
	var out []item
	run := q.items[:0:0]
	flush := func() {
		out = append(out, collapseRun(run)...)
		run = run[:0]
	}
	for _, it := range q.items {
		if it.barrier != nil {
			pending, halted := ResolveBarrier(it.barrier, nil, slices.Clip(it.halted))
			if pending {
				flush()
				out = append(out, it)
				continue
			}
			it.barrier, it.halted = nil, halted
		}
		run = append(run, it)
	}
	flush()
	q.items = out
}

// collapseRun merges the items of each type of run (no barriers) into one,
// in the xDS order of types.
func collapseRun(run []item) []item {
	acc := make(map[string]*item)
	last := make(map[string]int)
	var types []string
	for i := range run {
		it := run[i]
		t := it.view.TypeURL
		last[t] = i
		if a := acc[t]; a != nil {
			a.merge(it.view, it.names, it.beats, keys(it.force))
			a.recheck = a.recheck || it.recheck
			if a.canary == nil {
				a.canary = it.canary
			}
			a.halted = append(slices.Clip(a.halted), it.halted...)
			continue
		}
		cp := it
		acc[t] = &cp
		types = append(types, t)
	}
	slices.SortStableFunc(types, func(a, b string) int {
		if ra, rb := keying.OrderRank(a), keying.OrderRank(b); ra != rb {
			return ra - rb
		}
		return last[a] - last[b]
	})
	out := make([]item, 0, len(types))
	for _, t := range types {
		out = append(out, *acc[t])
	}
	return out
}

// merge folds the later change v of the item's type into the item. Pushes
// come in the order the Source published its Views, so v is the newer View
// (a relay-wide order: it may come from another scope of the relay).
func (it *item) merge(v *View, names, beats map[string]struct{}, force []string) {
	it.view = v
	if len(beats) > 0 {
		union := make(map[string]struct{}, len(it.beats)+len(beats))
		for _, m := range []map[string]struct{}{it.beats, beats} {
			for n := range m {
				union[n] = struct{}{}
			}
		}
		it.beats = union
	}
	if len(names) > 0 {
		if !it.owned {
			cp := make(map[string]struct{}, len(it.names)+len(names))
			for n := range it.names {
				cp[n] = struct{}{}
			}
			it.names, it.owned = cp, true
		}
		for n := range names {
			it.names[n] = struct{}{}
		}
	}
	it.addForce(force)
}

func (it *item) addForce(force []string) {
	if len(force) == 0 {
		return
	}
	if it.force == nil {
		it.force = make(map[string]struct{}, len(force))
	}
	for _, n := range force {
		it.force[n] = struct{}{}
	}
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
