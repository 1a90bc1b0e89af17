package relay

import (
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/metrics"
)

// Guarded rollout. When a cached resource changes upstream, the new version
// first goes to a canary cohort of its watchers (chosen from their node ids,
// at least one, at most rollout.canary_fraction of them). Every other watcher
// gets a barrier in its queue: that change and everything after it wait
// until the rollout resolves, so holding one change back never reorders the
// others (see downstream.Rollout). If all canaries ACK, or the hold passes
// with a NACK ratio within rollout.max_nack_ratio, the change is released to
// everyone at once. Otherwise it halts: the others drop the barrier item and
// keep the last accepted versions, later Views that still carry the halted
// versions are sent to them reverted, the relay's own View goes back to the
// accepted versions (new subscribers get those), and the upstream sending the
// same version again does not start another rollout; its next version does.
//
// One rollout per type and scope at a time: a change arriving while one is
// pending joins it. Each relay replica runs its own rollouts.

// rollout is one guarded rollout. Its fields set at start are read-only;
// the rest is guarded by mu. Lock order: Relay.mu → rollout.mu; rollout.mu is
// never held while calling a stream.
type rollout struct {
	r        *Relay
	tc       *typeCache
	startSeq uint64
	started  time.Time
	canaries map[downstream.Watcher]string // → node id

	mu       sync.Mutex
	names    map[string]string               // name → version rolled out
	accepted map[string]*downstream.Resource // name → last accepted resource
	state    downstream.RolloutState
	lastBad  uint64 // the last View Seq carrying the halted versions
	acks     map[downstream.Watcher]bool
	nacks    map[downstream.Watcher]string
	blamed   map[downstream.Watcher][]string // what each NACK is about (nil: all names)
	// want holds, per canary, the Seq of the View of the latest version of
	// the rollout it is to get: its verdict on an older View is not about
	// that version (the newer one may still be on its way in the fan-out).
	want     map[downstream.Watcher]uint64
	waiters  []downstream.Watcher
	reverted map[*downstream.View]*downstream.View
	timer    *time.Timer
	ended    time.Time
	held     map[downstream.Watcher]bool // streams given a barrier
}

func (ro *rollout) isCanary(w downstream.Watcher) bool {
	_, ok := ro.canaries[w]
	return ok
}

// hold reports whether w still needs its barrier (true once per stream).
// Called with Relay.mu held.
func (ro *rollout) hold(w downstream.Watcher) bool {
	if ro.held[w] {
		return false
	}
	ro.held[w] = true
	return true
}

// watches reports whether w watches a name of the rollout (or the
// wildcard). Called with Relay.mu held.
func (ro *rollout) watches(w downstream.Watcher) bool {
	if ro.tc.wild.has(w) {
		return true
	}
	ro.mu.Lock()
	defer ro.mu.Unlock()
	for n := range ro.names {
		if ro.tc.watchers[n].has(w) {
			return true
		}
	}
	return false
}

// RolloutInfo is one rollout in /debug/rollouts.
type RolloutInfo struct {
	Scope    string            `json:"scope,omitempty"`
	Type     string            `json:"type"`
	Versions map[string]string `json:"versions"` // name → version rolled out
	State    string            `json:"state"`    // pending, released, halted
	// Judged: a canary's ACK or NACK decided it. A release without it is
	// the hold passing with no verdict (no canary answered): no approval.
	Judged   bool       `json:"judged"`
	Canaries []string   `json:"canaries"` // node ids
	ACKs     int        `json:"acks"`
	NACKs    int        `json:"nacks"`
	Reasons  []string   `json:"nack_reasons,omitempty"`
	Started  time.Time  `json:"started"`
	Ended    *time.Time `json:"ended,omitempty"`
}

var stateNames = map[downstream.RolloutState]string{
	downstream.RolloutPending: "pending", downstream.RolloutReleased: "released", downstream.RolloutHalted: "halted",
}

// State implements downstream.Rollout.
func (ro *rollout) State() downstream.RolloutState {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.state
}

// Wait implements downstream.Rollout.
func (ro *rollout) Wait(w downstream.Watcher) bool {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.state != downstream.RolloutPending {
		return false
	}
	ro.waiters = append(ro.waiters, w)
	return true
}

// Names implements downstream.Rollout.
func (ro *rollout) Names() []string {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return slices.Collect(maps.Keys(ro.names))
}

// Covers implements downstream.Rollout.
func (ro *rollout) Covers(v *downstream.View) bool {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.state == downstream.RolloutHalted && v.TypeURL == ro.tc.typeURL && v.Seq >= ro.startSeq && v.Seq <= ro.lastBad
}

// Revert implements downstream.Rollout.
func (ro *rollout) Revert(v *downstream.View) *downstream.View {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if rv, ok := ro.reverted[v]; ok {
		return rv
	}
	rv := revertView(v, ro.accepted, ro.names)
	if ro.reverted == nil {
		ro.reverted = make(map[*downstream.View]*downstream.View)
	}
	ro.reverted[v] = rv
	return rv
}

// revertView returns a copy of v whose rolled-out names hold the accepted
// resources again (v itself when none of them is at the rolled-out version).
func revertView(v *downstream.View, accepted map[string]*downstream.Resource, rolled map[string]string) *downstream.View {
	var res map[string]*downstream.Resource
	for n, version := range rolled {
		if cur, ok := v.Resources[n]; ok && cur.Version == version {
			if res == nil {
				res = maps.Clone(v.Resources)
			}
			res[n] = reverted(accepted[n], cur)
		}
	}
	if res == nil {
		return v
	}
	rv := v.Next(v.Seq, v.Changed)
	rv.Resources = res
	return rv
}

// reverted returns the accepted content of a name where its rolled-out copy
// cur stands: from cur's upstream and listed as cur is. Which servers speak
// for the name, and whether the default servers list it in the wildcard
// set, is their current word, not part of the change rolled out.
func reverted(acc, cur *downstream.Resource) *downstream.Resource {
	plain := acc.Key == "" || acc.Key == acc.Name
	if !plain || (acc.Authority == cur.Authority && acc.Listed == cur.Listed) {
		return acc
	}
	c := acc.WithListed(cur.Listed)
	c.Authority = cur.Authority
	return c
}

// Report implements downstream.Rollout. A verdict on responses that carried
// none of the rollout's names (Delta) says nothing of it.
func (ro *rollout) Report(w downstream.Watcher, nack bool, reason string, carried []string, sent uint64) {
	ro.mu.Lock()
	if ro.state != downstream.RolloutPending {
		ro.mu.Unlock()
		return
	}
	if _, canary := ro.canaries[w]; !canary || (carried != nil && len(carried) == 0) || sent < ro.want[w] {
		ro.mu.Unlock()
		return
	}
	if nack {
		ro.nacks[w] = reason
		ro.blamed[w] = carried
		delete(ro.acks, w)
	} else {
		ro.acks[w] = true
		delete(ro.blamed, w)
	}
	halt := ro.nackRatio() > ro.r.cfg.Rollout.MaxNACKRatio
	release := !halt && len(ro.acks) == len(ro.canaries)
	ro.mu.Unlock()
	if halt || release {
		ro.resolve(!halt)
	}
}

// judged reports whether a canary gave a verdict (ACK or NACK). Called with
// mu held.
func (ro *rollout) judged() bool { return len(ro.acks)+len(ro.nacks) > 0 }

// nackRatio is the fraction of canaries that NACKed. Called with mu held.
func (ro *rollout) nackRatio() float64 {
	return float64(len(ro.nacks)) / float64(max(1, len(ro.canaries)))
}

// startRollout begins a rollout of the changed names of v (changed from old).
func (s *state) startRollout(tc *typeCache, old, v *downstream.View, names []string, watchers []downstream.Watcher) *rollout {
	ro := &rollout{r: s.relay, tc: tc, startSeq: v.Seq, started: time.Now(),
		canaries: make(map[downstream.Watcher]string), names: make(map[string]string),
		accepted: make(map[string]*downstream.Resource), acks: make(map[downstream.Watcher]bool),
		nacks: make(map[downstream.Watcher]string), blamed: make(map[downstream.Watcher][]string),
		held: make(map[downstream.Watcher]bool), want: make(map[downstream.Watcher]uint64)}
	ro.add(old, v, names)
	for _, w := range s.canaryCohort(tc.typeURL, names, watchers) {
		ro.canaries[w] = s.nodeID(w)
		ro.want[w] = v.Seq
	}
	ro.timer = time.AfterFunc(s.cfg.Rollout.Hold, func() { ro.resolve(true) })
	tc.ro = ro
	s.m.RolloutsStarted.Inc()
	return ro
}

// canaryCohort chooses the canaries of a rollout of names among watchers: at
// least one, at most rollout.canary_fraction of them, among those that can
// judge the change (downstream.Judge: connected, not NACKing the type) when
// any can, else among all (the rollout then likely goes unjudged). The
// choice is deterministic from node ids (and the first name, so that not
// always the same nodes are canaries).
func (s *state) canaryCohort(typeURL string, names []string, watchers []downstream.Watcher) []downstream.Watcher {
	n := max(1, int(s.cfg.Rollout.CanaryFraction*float64(len(watchers))))
	ws := make([]downstream.Watcher, 0, len(watchers))
	for _, w := range watchers {
		if j, ok := w.(downstream.Judge); !ok || j.CanJudge(typeURL) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		ws = slices.Clone(watchers)
	}
	sort.Strings(names)
	key := func(w downstream.Watcher) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s.nodeID(w) + "\x00" + names[0]))
		return h.Sum64()
	}
	slices.SortFunc(ws, func(a, b downstream.Watcher) int {
		ka, kb := key(a), key(b)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return int(a.ID() - b.ID())
	})
	return ws[:min(n, len(ws))]
}

// add joins more changed names to a pending rollout. Called with Relay.mu
// held.
func (ro *rollout) add(old, v *downstream.View, names []string) {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	for _, n := range names {
		if _, ok := ro.accepted[n]; !ok {
			ro.accepted[n] = old.Resources[n]
		}
		ro.names[n] = v.Resources[n].Version
	}
	for w := range ro.canaries {
		if ro.tc.wild.has(w) || slices.ContainsFunc(names, func(n string) bool { return ro.tc.watchers[n].has(w) }) {
			ro.want[w] = v.Seq // v goes to it: its verdict waits for v
		}
	}
}

func (s *state) nodeID(w downstream.Watcher) string {
	if b := s.bound[w.ID()]; b != nil {
		return b.node.GetId()
	}
	return ""
}

// resolve ends a rollout: release (or, at the hold, release unless too many
// canaries NACKed) or halt.
func (ro *rollout) resolve(release bool) {
	s := ro.r.lock()
	ro.mu.Lock()
	if ro.state != downstream.RolloutPending {
		ro.mu.Unlock()
		s.unlock()
		return
	}
	if ro.nackRatio() > s.cfg.Rollout.MaxNACKRatio {
		release = false
	}
	tc := ro.tc
	ro.timer.Stop()
	ro.ended = time.Now()
	waiters := ro.waiters
	ro.waiters = nil
	var fix *downstream.View
	if release {
		ro.state = downstream.RolloutReleased
	} else {
		ro.state = downstream.RolloutHalted
		ro.lastBad = tc.view.Seq
		ro.releaseUnblamed()
		for n, v := range ro.names {
			if v != "" {
				tc.entry(n).halted = v
			}
		}
		// The relay's own View returns to the accepted versions.
		if rv := revertView(tc.view, ro.accepted, ro.names); rv != tc.view {
			changed := make(map[string]struct{}, len(ro.names))
			for n := range ro.names {
				changed[n] = struct{}{}
			}
			fix = rv.Next(s.nextSeq(), changed)
			fix.Received = time.Now()
		}
	}
	reasons := slices.Collect(maps.Values(ro.nacks))
	names := slices.Sorted(maps.Keys(ro.names))
	judged := ro.judged()
	ro.mu.Unlock()

	if tc.ro == ro {
		tc.ro = nil
	}
	s.rolloutLog = append(s.rolloutLog, ro)
	if len(s.rolloutLog) > 50 {
		s.rolloutLog = s.rolloutLog[1:]
	}
	result := "released"
	switch {
	case !release:
		result = "halted"
		s.log.Warn("rollout halted: the others keep the last accepted versions",
			zap.String("type", tc.typeURL), zap.Strings("names", names), zap.Strings("nack_reasons", reasons))
	case !judged:
		result = "unjudged"
		s.log.Warn("rollout released without a verdict: no canary ACKed or NACKed within the hold",
			zap.String("type", tc.typeURL), zap.Strings("names", names))
	}
	s.m.Rollouts.WithLabelValues(metrics.TypeLabel(tc.typeURL), result).Inc()
	if fix != nil {
		s.publish(tc, fix)
		s.notify(tc, fix)
	}
	s.unlock()
	for _, w := range waiters {
		w.Wake()
	}
}

// releaseUnblamed takes out of a halting rollout the names no NACK was
// about: a Delta canary NACKs the resources of the responses it was sent, so
// a name that joined the rollout in an earlier response it accepted (or
// was not judged on) is released, not halted with the rest. Called with mu
// held.
func (ro *rollout) releaseUnblamed() {
	blamed := make(map[string]bool)
	for w := range ro.nacks {
		carried := ro.blamed[w]
		if carried == nil {
			return // a NACK of the whole state: every name is suspect
		}
		for _, n := range carried {
			blamed[n] = true
		}
	}
	for n := range ro.names {
		if !blamed[n] {
			delete(ro.names, n)
			delete(ro.accepted, n)
		}
	}
}

// DebugRollouts lists the rollouts in progress and the last ones resolved.
func (r *Relay) DebugRollouts() []RolloutInfo {
	s := r.lock()
	all := slices.Clone(s.rolloutLog)
	for _, sc := range s.scopes {
		for _, tc := range sc.types {
			if tc.ro != nil {
				all = append(all, tc.ro)
			}
		}
	}
	s.unlock()
	out := make([]RolloutInfo, 0, len(all))
	for _, ro := range all {
		ro.mu.Lock()
		info := RolloutInfo{Scope: ro.tc.sc.key, Type: ro.tc.typeURL, Versions: maps.Clone(ro.names),
			State: stateNames[ro.state], Judged: ro.judged(), ACKs: len(ro.acks), NACKs: len(ro.nacks), Started: ro.started}
		for _, id := range ro.canaries {
			info.Canaries = append(info.Canaries, id)
		}
		sort.Strings(info.Canaries)
		for _, reason := range ro.nacks {
			info.Reasons = append(info.Reasons, reason)
		}
		sort.Strings(info.Reasons)
		if !ro.ended.IsZero() {
			t := ro.ended
			info.Ended = &t
		}
		ro.mu.Unlock()
		out = append(out, info)
	}
	return out
}

// clearHalted forgets the version of name whose rollout halted: the
// upstream sent another.
func (tc *typeCache) clearHalted(name string) {
	if e := tc.names[name]; e != nil && e.halted != "" {
		e.halted = ""
		tc.tidy(name)
	}
}
