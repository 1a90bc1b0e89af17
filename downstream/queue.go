package downstream

// item is one pending change of one type for one stream.
type item struct {
	view *View
	// names are the names to consider: the View's Changed set (shared) or,
	// after a merge, a private union.
	names map[string]struct{}
	// force holds newly subscribed names that must be sent even when
	// unchanged; Wildcard ("*") forces the wildcard set.
	force map[string]struct{}
	owned bool // names is a private copy

	// hold makes the item a barrier: it and everything behind it wait
	// until the rollout resolves (nil: no barrier).
	hold Rollout
	// canary reports the verdict on this item's response to the rollout.
	canary Rollout
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
	if n := len(q.items); n > 0 && q.items[n-1].view.TypeURL == v.TypeURL && q.items[n-1].hold == nil {
		q.items[n-1].merge(v, changed, force)
		return
	}
	it := item{view: v, names: changed}
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
	q.append(item{view: v, names: names, owned: true, hold: r})
}

func (q *queue) append(it item) {
	q.items = append(q.items, it)
	if len(q.items) > maxQueue && !q.holding() {
		q.collapse()
	}
}

// holding reports a barrier in the queue: it is not collapsed then (the
// barrier lasts at most the rollout's hold).
func (q *queue) holding() bool {
	for i := range q.items {
		if q.items[i].hold != nil {
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
		q.items = q.items[:0:0]
	}
	return it, true
}

// collapse merges every type's items into that type's last item, keeping the
// last items in their order. It only runs for a stream that has fallen
// maxQueue changes behind; such a client gets the latest state of each type.
func (q *queue) collapse() {
	last := make(map[string]int)
	for i, it := range q.items {
		last[it.view.TypeURL] = i
	}
	var out []item
	acc := make(map[string]*item)
	for i := range q.items {
		it := q.items[i]
		t := it.view.TypeURL
		if a := acc[t]; a != nil {
			a.merge(it.view, it.names, keys(it.force))
			if a.canary == nil {
				a.canary = it.canary
			}
		} else {
			cp := it
			acc[t] = &cp
		}
		if last[t] == i {
			out = append(out, *acc[t])
		}
	}
	q.items = out
}

func (it *item) merge(v *View, names map[string]struct{}, force []string) {
	if v != it.view {
		if v.Seq > it.view.Seq {
			it.view = v
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
