package gworacle

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Shrink returns a shorter schedule that still fails, and how (each
// candidate is run up to tries times: runs are not deterministic), trying
// for at most budget.
func Shrink(s *Schedule, err error, dir string, tries int, budget time.Duration) (*Schedule, error) {
	deadline := time.Now().Add(budget)
	last := err
	fails := func(c *Schedule) bool {
		for i := range tries {
			sub := filepath.Join(dir, fmt.Sprintf("shrink-%d", i))
			_ = os.RemoveAll(sub)
			_ = os.MkdirAll(sub, 0o755)
			if err := Execute(c, sub, nil); err != nil {
				last = err
				return true
			}
		}
		return false
	}
	best := s
	for chunk := len(best.Steps) / 2; chunk >= 1 && time.Now().Before(deadline); {
		shrunk := false
		for i := 0; i < len(best.Steps) && time.Now().Before(deadline); i += chunk {
			c := &Schedule{Seed: best.Seed, Opts: best.Opts, Steps: slices.Delete(slices.Clone(best.Steps), i, min(i+chunk, len(best.Steps)))}
			if fails(c) {
				best, shrunk = c, true
				i -= chunk
			}
		}
		if !shrunk {
			chunk /= 2
		}
	}
	if best == s {
		last = err
	}
	return best, last
}
