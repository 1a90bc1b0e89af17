package downstream

// How long make before break (mbb.go) waits: the reconnect's grace, in
// which a client that came back with config may hold what it has not asked
// for yet; the waits for the move of a referrer that may follow a removal;
// and the timers that look again at what the stream withholds.

import (
	"maps"
	"slices"
	"time"
)

// referrerGrace is how long after a client came back with config from
// elsewhere (a reconnect: version_info, initial_resource_versions) a type it
// has not asked for yet may still be one it holds: clients send every
// type's first request at once, but the relay may answer the first before
// it reads the others. Only the time the stream waits for its client
// counts: the relay may take longer than that to read a request (ten
// thousand names on a loaded machine) while the next ones wait unread. It
// is also the default of Options.MoveWait.
const referrerGrace = time.Second

// inGrace reports whether a client that came back with config may still
// hold a type it has not asked for: within referrerGrace of the stream
// waiting for it (graceOn), or, until it answers one of the stream's
// responses (answered), within Options.MoveWait of its return. Called with
// mu held.
func (st *stream) inGrace() bool {
	return time.Now().Before(st.answerBy) || st.graceOn()
}

// graceOn reports whether the stream is within referrerGrace of waiting for
// a client that came back with config. Called with mu held.
func (st *stream) graceOn() bool {
	if st.reading && st.graceLeft > 0 {
		return true
	}
	return !st.graceUntil.IsZero() && time.Now().Before(st.graceUntil)
}

// cameBack starts the grace of a client that came back with config and the
// wait for its answer, and looks again at what it withheld when they end.
// Called with mu held.
func (st *stream) cameBack() {
	if !st.graceUntil.IsZero() {
		return
	}
	now := time.Now()
	st.graceUntil = now.Add(referrerGrace)
	// The stream waits for its client while its next requests are still on
	// their way (ten thousand names arriving on a loaded machine), and
	// cannot tell: only the client's answer says it sent them all.
	st.answerBy = now.Add(st.srv.opts.MoveWait)
	st.recheckAfter(st.srv.opts.MoveWait)
	if st.reading {
		st.graceLeft = referrerGrace // (looked at again when the read ends)
		return
	}
	st.recheckAfter(referrerGrace)
}

// answered notes that the client answered the stream's response n (a
// request names its nonce): it sent that request after its first request of
// every type, so a client that came back has asked by now for each type it
// holds. It reports whether the stream looks again at what it withheld.
// Called with mu held.
func (st *stream) answered(n uint64) bool {
	if st.answerBy.IsZero() || n == 0 || n > st.nonce {
		return false // (no wait, or not one of this stream's responses)
	}
	st.answerBy = time.Time{}
	return !st.inGrace() && st.recheckWithheldLocked()
}

// readStarts stops the grace while the handler takes in a request the
// client sent.
func (st *stream) readStarts() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reading = true
	if st.graceOn() {
		st.graceLeft = time.Until(st.graceUntil)
	}
}

// readEnds restarts the grace once the handler waits for the client again,
// and looks again at what the stream withholds when it ends.
func (st *stream) readEnds() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reading = false
	if st.graceLeft > 0 {
		st.graceUntil = time.Now().Add(st.graceLeft)
		st.recheckAfter(st.graceLeft)
		st.graceLeft = 0
	}
}

// recheckAfter looks again at what the stream withholds once d has passed.
// Called with mu held.
func (st *stream) recheckAfter(d time.Duration) {
	time.AfterFunc(d, func() {
		st.mu.Lock()
		sched := !st.closed && st.recheckWithheldLocked() && st.claimFlushLocked()
		st.mu.Unlock()
		st.schedule(sched, false)
	})
}

// recheckWithheldLocked queues every type that keeps something back to be
// looked at again; it reports whether it queued anything. Called with mu
// held.
func (st *stream) recheckWithheldLocked() bool {
	queued := false
	for _, t := range slices.Sorted(maps.Keys(st.types)) {
		ts := st.types[t]
		if ts.latest != nil && (len(ts.withheldRefs) > 0 || ts.withholding == "referenced") {
			st.q.pushNames(ts.latest, slices.Collect(maps.Keys(ts.withheldRefs)))
			queued = true
		}
	}
	return queued
}

// unreadReferrer is the missingSince key (never a resource's) of a full
// state held whole for a referrer the stream cannot read.
const unreadReferrer = ""

// waitsForUnread reports whether a full state that may drop what a
// referrer the stream cannot read (unread, by type) refers to is still held
// whole: within the reconnect's grace, or within Options.AnswerWait of the
// stream's first look at it (m), while the relay may still get the
// upstream's word on the referrer, or on the listener that names it, and
// the client the change that lets it go; within Options.MoveWait of the
// latest removal (m, see removedLately), whose move may follow; or while
// that word is queued for the client (unreadQueued), or awaited by the
// relay itself (unreadUnsure). Past that, nothing tells when the reference
// goes, and holding on would withhold every later update of the type. rc
// notes when the stream looks again. Called with mu held.
func (st *stream) waitsForUnread(m missing, unread map[string][]string, rc *rechecks) bool {
	return st.inGrace() || time.Since(m.seen) < st.srv.opts.AnswerWait || rc.within(m.removed) ||
		st.unreadQueued(unread) || st.unreadUnsure(unread)
}

// removedLately returns m, the unread referrer's entry, with removed moved
// to v's arrival when v itself removed something the client may hold that
// b drops: the wait for the referrer's move runs from the latest such
// removal (waitsForUnread), as an upstream that sends type by type sends
// the move after it, and the stream's first look at the referrer may be
// long past (see noteMissing). Called with mu held.
func (ts *typeState) removedLately(v *View, b *body, m missing) missing {
	if !v.Received.After(m.removed) {
		return m // (looked at already: a View's ten thousand names once)
	}
	for k := range v.Changed {
		if _, present := v.Resources[k]; !present && ts.drops(v, b, k) {
			m.removed = v.Received
			ts.missingSince[unreadReferrer] = m
			break
		}
	}
	return m
}

// unreadQueued reports whether a change queued behind the response concerns
// a referrer the stream cannot read (unread, by type): the upstream's word
// on it has come, an upstream that breaks first sends the cluster's removal
// before the route's move, and the stream looks again once the change is
// built (releaseWithheld). The queue drains, so the wait ends even when the
// relay itself was too busy to look before AnswerWait passed. Called with
// mu held.
func (st *stream) unreadQueued(unread map[string][]string) bool {
	for t, keys := range unread {
		for _, k := range keys {
			if st.q.changes(t, k) {
				return true
			}
		}
	}
	return false
}

// mayLeave reports whether the reference to name, missing from a full
// state since m, which the client holds from elsewhere so that the
// response cannot keep it, may still be about to go, so the response waits
// for it: within the reconnect's grace; while a queued change of the
// referrer drops it (refs.leaving); within Options.MoveWait of the
// removal's arrival; or, while the relay's copy of the referrer is one no
// live upstream confirms (refs.doubtful), within Options.AnswerWait of the
// stream's first look at the removal. Every wait is bounded: an upstream
// that is away, or silent, may never answer, and the client would get no
// update of the type. Called with mu held.
func (st *stream) mayLeave(m missing, refs refSet, name string) bool {
	return time.Since(m.removed) < st.srv.opts.MoveWait || st.inGrace() || refs.leaving[name] ||
		time.Since(m.seen) < st.srv.opts.AnswerWait && refs.doubtful[name]
}

// missing is when a full state first lacked a referenced key the client
// holds from elsewhere: when that removal arrived from upstream, and when
// the stream first judged it.
type missing struct{ removed, seen time.Time }

// noteMissing returns when key's removal, as first seen by the stream in v,
// arrived from upstream and when the stream first saw it; when that is now,
// it notes in rc that the stream looks again when the waits end. An
// upstream that sends type by type — ordered, or not — may send the
// referrer's move just after the removal, and nothing on a SotW stream
// says whether one is coming, so only a short wait from the removal (not
// from the reconnect, which may be long past) tells a move from the
// upstream's own dangling reference. Called with mu held.
func (ts *typeState) noteMissing(v *View, key string, rc *rechecks) missing {
	m, seen := ts.missingSince[key]
	if seen {
		return m
	}
	m = missing{removed: v.Received, seen: time.Now()}
	if m.removed.IsZero() {
		m.removed = m.seen
	}
	if ts.missingSince == nil {
		ts.missingSince = make(map[string]missing)
	}
	ts.missingSince[key] = m
	rc.add(m)
	return m
}

// rechecks are when the stream looks again at the keys a full state first
// lacked in one look (see mayLeave): once for them all, not once per key,
// each looking at them all.
type rechecks struct {
	wait  time.Duration // Options.MoveWait
	any   bool          // a key was first missing: its AnswerWait runs from now
	grace time.Time     // when the last wait for a move a key was judged within ends (zero: none)
}

// add notes a key first missing since m.
func (rc *rechecks) add(m missing) {
	rc.any = true
	rc.within(m.removed)
}

// within reports whether the wait for a move after a removal that arrived
// at removed is still on, and notes when it ends.
func (rc *rechecks) within(removed time.Time) bool {
	end := removed.Add(rc.wait)
	if !time.Now().Before(end) {
		return false
	}
	if end.After(rc.grace) {
		rc.grace = end
	}
	return true
}

// recheckMissing sets the timers of rc. Called with mu held.
func (st *stream) recheckMissing(rc rechecks) {
	if !rc.grace.IsZero() {
		st.recheckAfter(time.Until(rc.grace)) // (at once when already past)
	}
	if rc.any {
		st.recheckAfter(st.srv.opts.AnswerWait)
	}
}

// unreadUnsure reports whether the stream withholds a referrer it cannot
// read (unread, by type) because the relay's copy is unsure (View.Unsure)
// in the last View of its type the stream looked at: the relay itself still
// waits for the upstream's word on it, and its answer, or the relay's own
// does-not-exist wait, ends that — on a loaded machine later than any
// clock here would guess. The View that ends it releases the hold once the
// stream looks at it (releaseWithheld). Called with mu held.
func (st *stream) unreadUnsure(unread map[string][]string) bool {
	for rt, keys := range unread {
		ts := st.types[rt]
		if ts == nil || ts.lastItem == nil {
			continue
		}
		for _, k := range keys {
			if _, unsure := ts.lastItem.Unsure[k]; unsure {
				return true
			}
		}
	}
	return false
}
