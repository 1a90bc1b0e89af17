package downstream

import "sync"

// pool is the shared set of sender goroutines that drain stream queues. A
// stream is scheduled at most once at a time. Workers beyond base exist only
// while there is a backlog, so a client whose sends block (it stopped
// reading) holds one worker and never delays the others.
type pool struct {
	base, max int

	mu      sync.Mutex
	cond    *sync.Cond
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

// schedule queues s for a worker.
func (p *pool) schedule(s *stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.q = append(p.q, s)
	p.wakeLocked()
}

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
		for len(p.q) == 0 && !p.closed {
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
		s := p.q[0]
		p.q[0] = nil
		p.q = p.q[1:]
		if len(p.q) == 0 {
			p.q = p.q[:0:0]
		} else {
			// This flush may block on a client that stopped reading: make sure
			// someone else serves the rest of the queue meanwhile.
			p.wakeLocked()
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
	p.q = nil
	p.idle = 0
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
