package downstream

import "sync"

// pool is the shared set of sender goroutines that drain stream queues. A
// stream is scheduled at most once at a time. Workers beyond base exist only
// while there is a backlog. A send never blocks a worker for long: a stream
// sends only while its client has acknowledged all but a little of what it
// was sent (stream.go, sendBudget), so a client that stopped reading holds
// no worker.
//
// Streams with an urgent flush — the answer to a subscription, a new
// client's first response — go before the backlog of a fan-out.
type pool struct {
	base, max int

	mu      sync.Mutex
	cond    *sync.Cond
	urgent  []*stream // guarded by mu: served first
	q       []*stream // guarded by mu
	idle    int       // guarded by mu
	workers int       // guarded by mu
	closed  bool      // guarded by mu
	wg      sync.WaitGroup
}

func newPool(base, max int) *pool {
	p := &pool{base: base, max: max}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// schedule queues s for a worker, urgent ones before the others.
func (p *pool) schedule(s *stream, urgent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if urgent {
		p.urgent = append(p.urgent, s)
	} else {
		p.q = append(p.q, s)
	}
	p.wakeLocked()
}

// popLocked takes the next stream to flush. Called with mu held and a
// stream queued.
func (p *pool) popLocked() *stream {
	q := &p.q
	if len(p.urgent) > 0 {
		q = &p.urgent
	}
	s := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = (*q)[:0:0]
	}
	return s
}

func (p *pool) queued() int { return len(p.urgent) + len(p.q) }

// wakeLocked gets a worker to the queue: an idle one, else a new one. The
// idle count drops at the signal, so two signals never target one waiter.
// Called with mu held.
func (p *pool) wakeLocked() {
	if p.idle > 0 {
		p.idle--
		p.cond.Signal()
		return
	}
	if p.workers < p.max {
		p.workers++
		p.wg.Add(1)
		go p.work()
	}
}

func (p *pool) work() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		for p.queued() == 0 && !p.closed {
			if p.workers > p.base {
				p.workers--
				p.mu.Unlock()
				return
			}
			p.idle++
			p.cond.Wait() // the waker took us off the idle count
		}
		if p.closed {
			p.workers--
			p.mu.Unlock()
			return
		}
		s := p.popLocked()
		if p.queued() > 0 {
			p.wakeLocked() // the rest of the queue is served meanwhile
		}
		p.mu.Unlock()
		s.flush()
		p.mu.Lock()
	}
}

// close stops the workers and waits for them. Streams still queued are
// dropped; their handlers end with the grpc server.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.q, p.urgent = nil, nil
	p.idle = 0
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
