package downstream

import (
	"runtime"
	"time"

	"go.uber.org/zap"
)

// Notify implements Watcher: it queues the change and schedules a flush,
// urgently for the answer to a subscription.
func (st *stream) Notify(v *View, force []string) {
	st.mu.Lock()
	sched := false
	if !st.closed {
		st.q.push(v, force)
		if ts := st.types[v.TypeURL]; ts != nil {
			ts.latest = v
		}
		sched = st.claimFlushLocked()
	}
	st.mu.Unlock()
	st.schedule(sched, force != nil)
}

// NotifyRollout implements Watcher.
func (st *stream) NotifyRollout(v *View, r Rollout, canary bool) {
	st.mu.Lock()
	sched := false
	if !st.closed {
		st.q.pushRollout(v, r, canary)
		if ts := st.types[v.TypeURL]; ts != nil {
			ts.latest = v
			if canary && changesAny(v, r.Names()) {
				ts.rollout().canaryWant = v.Seq
			}
		}
		sched = st.claimFlushLocked()
	}
	st.mu.Unlock()
	st.schedule(sched, false)
}

// changesAny reports whether v changes one of names.
func changesAny(v *View, names []string) bool {
	for _, n := range names {
		if _, ok := v.Changed[n]; ok {
			return true
		}
	}
	return false
}

// Wake implements Watcher: a rollout the stream waits on has resolved.
func (st *stream) Wake() { st.wake(false) }

// kick schedules a flush of what the stream queued itself.
func (st *stream) kick() { st.wake(true) }

// wake schedules a flush of an open stream. Called without mu.
func (st *stream) wake(urgent bool) {
	st.mu.Lock()
	sched := !st.closed && st.claimFlushLocked()
	st.mu.Unlock()
	st.schedule(sched, urgent)
}

// claimFlushLocked marks the stream scheduled unless a flush is pending or
// the stream waits for acknowledgements; it reports whether the caller must
// hand the stream to the pool (with schedule, once mu is released). Called
// with mu held.
func (st *stream) claimFlushLocked() bool {
	sched := !st.scheduled && !st.gated
	st.scheduled = st.scheduled || sched
	return sched
}

// schedule hands the stream to the pool when claimFlushLocked said so.
// Called without mu: the pool may run the flush at once.
func (st *stream) schedule(sched, urgent bool) {
	if sched {
		st.srv.pool.schedule(st, urgent)
	}
}

// barrier handles a rollout barrier at the head of the queue: it reports
// whether the flush must stop (the rollout is pending; the stream is woken
// when it resolves). A released barrier becomes an ordinary item; so does a
// halted one, its rollout remembered, so that it and later Views still
// carrying the halted change are sent reverted: the other changes of its
// View (a removal in the same upstream response) still go. Called with mu
// held.
func (st *stream) barrier() (stop bool) {
	for {
		h := st.q.head()
		if h == nil || h.barrier == nil {
			return false
		}
		ts := st.types[h.view.TypeURL]
		var halted []Rollout
		if ts != nil && ts.rolloutState != nil {
			halted = ts.halted
		}
		pending, halted := ResolveBarrier(h.barrier, st, halted)
		if pending {
			return true
		}
		if ts != nil && (ts.rolloutState != nil || len(halted) > 0) {
			ts.rollout().halted = halted
		}
		h.barrier = nil
	}
}

// flush sends queued changes until the queue is empty or waits on a
// rollout. Run by a pool worker. Each round is three steps: take the next
// change and build its response (under mu), send it (without mu: a send
// may block on the client), and account for the send (under mu).
func (st *stream) flush() {
	for {
		out, more := st.next()
		if !more {
			return
		}
		if out.msg == nil {
			continue
		}
		err := st.send(out.msg)
		st.sent(out, err)
	}
}

// outgoing is a response built by next, on its way to the client.
type outgoing struct {
	msg      *encoded // nil: the change had nothing for the client
	counters *typeCounters
}

// next takes the next queued change and builds its response; more is false
// when the flush ends (queue empty, a rollout pending, the stream gated or
// closed).
func (st *stream) next() (out outgoing, more bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.nextLocked()
}

// nextLocked is next under mu. Called with mu held.
func (st *stream) nextLocked() (out outgoing, more bool) {
	it, ok := st.dequeueLocked()
	if !ok {
		return out, false
	}
	return st.buildLocked(it), true
}

// dequeueLocked takes the next change the stream may send; ok is false when
// the flush ends. Called with mu held.
func (st *stream) dequeueLocked() (it item, ok bool) {
	if !st.closed && st.barrier() {
		st.scheduled = false
		return it, false
	}
	if st.inflightBytes >= sendBudget && st.q.len() > 0 {
		st.gated = true // resumed by ackInflight
		st.srv.m.StreamsWaiting.Inc()
		st.scheduled = false
		return it, false
	}
	it, ok = st.q.pop()
	if !ok || st.closed {
		st.scheduled = false
		return it, false
	}
	return it, true
}

// buildLocked builds the response to the change it and counts it in
// flight; its msg is nil when the change has nothing for the client.
// Called with mu held.
func (st *stream) buildLocked(it item) (out outgoing) {
	ts := st.types[it.view.TypeURL]
	if ts != nil && len(it.halted) > 0 {
		ro := ts.rollout()
		ro.halted = append(ro.halted, it.halted...) // barriers the queue collapsed
	}
	if ts != nil && it.view == ts.lastItem && len(it.force) == 0 && len(it.beats) == 0 && !it.recheck {
		return out // this very change was looked at already: nothing new
	}
	if ts != nil {
		ts.lastItem = it.view
	}
	if ts != nil && ts.rolloutState != nil && len(ts.halted) > 0 {
		// Items leave in View order and every item behind a barrier is at
		// least as new as the rollout, so a rollout that no longer covers
		// this View is forgotten.
		it.view, ts.halted = Reverted(it.view, ts.halted)
	}
	var msg *encoded
	if st.delta {
		msg = st.buildDelta(it)
	} else {
		msg = st.buildSotW(it)
	}
	// Make before break: what the client holds of the type changed, or
	// the stream learnt what it is: what it withheld may go now.
	st.releaseWithheld(it.view.TypeURL)
	if ts := st.types[it.view.TypeURL]; ts != nil {
		out.counters = ts.counters
	}
	st.sending = msg != nil
	if msg != nil {
		st.inflight = append(st.inflight, flight{nonce: st.nonce, size: msg.size(), typeURL: it.view.TypeURL})
		if ts != nil {
			ts.updated = time.Now()
		}
		st.inflightBytes += msg.size()
		if ce := st.srv.log.Check(zap.DebugLevel, "response"); ce != nil {
			ce.Write(zap.Uint64("stream", st.id), zap.String("node", st.nodeID), zap.String("type", it.view.TypeURL),
				zap.Uint64("view", it.view.Seq), zap.Int("names", len(it.names)), zap.Int("forced", len(it.force)),
				zap.Int("beats", len(it.beats)), zap.Int("bytes", msg.size()))
		}
	}
	out.msg = msg
	return out
}

// send writes a response to the client. Called without mu.
func (st *stream) send(msg *encoded) error {
	err := st.ss.SendMsg(msg)
	// Let the connection's writer, which the send just woke, run now rather
	// than queue behind the rest of a fan-out: the runnable goroutines stay
	// few, so a new client's stream or an admin request is not scheduled
	// behind thousands of them.
	runtime.Gosched()
	return err
}

// sent accounts for a send: it lets close return, ends the stream when the
// send failed, and counts the response.
func (st *stream) sent(out outgoing, err error) {
	st.mu.Lock()
	st.sending = false
	if st.closed {
		st.done <- struct{}{} // close waits for this send (buffered: never blocks)
	}
	if err != nil {
		st.closed = true
	}
	st.mu.Unlock()
	if err != nil {
		st.srv.log.Debug("send failed", zap.Uint64("stream", st.id), zap.Error(err))
		return
	}
	out.counters.responses.Inc()
	out.counters.bytes.Add(float64(out.msg.size()))
}
