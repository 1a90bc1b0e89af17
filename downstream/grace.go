package downstream

// The reconnect's grace: how long make before break (mbb.go) assumes a
// client that came back with config may hold what it has not asked for yet,
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
// also bounds how long a full-state response is held for a referenced
// resource the stream cannot read after its removal arrived (mayLeave).
const referrerGrace = time.Second

// inGrace reports whether the stream is within referrerGrace of a client
// that came back with config. Called with mu held.
func (st *stream) inGrace() bool {
	if st.reading && st.graceLeft > 0 {
		return true
	}
	return !st.graceUntil.IsZero() && time.Now().Before(st.graceUntil)
}

// cameBack starts the grace of a client that came back with config and looks
// again at what it withheld when the grace ends. Called with mu held.
func (st *stream) cameBack() {
	if !st.graceUntil.IsZero() {
		return
	}
	st.graceUntil = time.Now().Add(referrerGrace)
	if st.reading {
		st.graceLeft = referrerGrace // (looked at again when the read ends)
		return
	}
	st.recheckAfter(referrerGrace)
}

// readStarts stops the grace while the handler takes in a request the
// client sent.
func (st *stream) readStarts() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reading = true
	if st.inGrace() {
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
