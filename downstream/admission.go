package downstream

import (
	"sync"
	"time"
)

// admission is a token bucket on new streams: a reconnect storm is refused
// with RESOURCE_EXHAUSTED (clients retry with backoff) instead of becoming a
// burst of work. Safe for concurrent use.
type admission struct {
	rate  float64 // tokens per second; 0 admits everything
	burst float64

	mu     sync.Mutex
	tokens float64   // guarded by mu
	last   time.Time // guarded by mu
}

func newAdmission(rate float64) *admission {
	return &admission{rate: rate, burst: rate, tokens: rate}
}

// admit takes a token if one is left.
func (a *admission) admit(now time.Time) bool {
	if a.rate <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.last.IsZero() {
		a.tokens = min(a.burst, a.tokens+now.Sub(a.last).Seconds()*a.rate)
	}
	a.last = now
	if a.tokens < 1 {
		return false
	}
	a.tokens--
	return true
}
