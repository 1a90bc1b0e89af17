package relay

import (
	"sync"

	"github.com/xds-relay/xds-relay/downstream"
)

// The fan-out of a change runs outside Relay.mu. Under the lock the relay
// publishes the new View and resolves who watches what changed — once each
// — into a delivery; one goroutine then hands each delivery to its streams
// (Watcher.Notify: a queue append and a schedule on the sender pool), in the
// order the relay made them. So every stream still sees the changes in the
// upstream's order, and a 10,000-stream fan-out never holds up a Watch, a
// Bind, another upstream's update or an admin request.
//
// A subscription change is answered under the lock, directly, as before
// (Watch) — unless a delivery for that stream is still on its way: then the
// answer joins the queue behind it, so that it never overtakes a change the
// stream has not been told of. A binding counts its deliveries under way.

// delivery is one notification of one View for a set of streams.
type delivery struct {
	to     []*binding
	v      *downstream.View
	force  []string           // names to send even unchanged (a Watch answer)
	ro     downstream.Rollout // NotifyRollout instead of Notify
	canary bool
}

// fanout is the ordered queue of deliveries and its goroutine. Safe for
// concurrent use; the lock order is Relay.mu → fanout.mu.
type fanout struct {
	wake chan struct{} // one slot: deliveries are queued
	done chan struct{} // closed by close
	once sync.Once
	wg   sync.WaitGroup

	mu sync.Mutex
	q  []delivery // guarded by mu
}

func newFanout() *fanout {
	f := &fanout{wake: make(chan struct{}, 1), done: make(chan struct{})}
	f.wg.Add(1)
	go f.run()
	return f
}

// add queues d for its streams. Called with Relay.mu held, so deliveries
// keep the relay's order.
func (f *fanout) add(d delivery) {
	if len(d.to) == 0 {
		return
	}
	for _, b := range d.to {
		b.pending.Add(1)
	}
	f.mu.Lock()
	f.q = append(f.q, d)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fanout) run() {
	defer f.wg.Done()
	for {
		select {
		case <-f.done:
			return
		case <-f.wake:
		}
		for {
			f.mu.Lock()
			q := f.q
			f.q = nil
			f.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, d := range q {
				d.deliver()
			}
		}
	}
}

// deliver notifies d's streams. A stream that has ended ignores it.
func (d delivery) deliver() {
	for _, b := range d.to {
		d.notify(b.w)
		b.pending.Add(-1)
	}
}

// notify tells w of d.
func (d delivery) notify(w downstream.Watcher) {
	if d.ro != nil {
		w.NotifyRollout(d.v, d.ro, d.canary)
		return
	}
	w.Notify(d.v, d.force)
}

// close stops the goroutine; deliveries not made are dropped (the streams
// have ended). Call after the downstream server closed.
func (f *fanout) close() {
	f.once.Do(func() { close(f.done) })
	f.wg.Wait()
}
