package oracle

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xds-relay/xds-relay/internal/shrink"
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
	steps := shrink.Steps(s.Steps, func(steps []Step) bool {
		return fails(&Schedule{Seed: s.Seed, Opts: s.Opts, Steps: steps})
	}, deadline)
	if len(steps) == len(s.Steps) {
		return s, err
	}
	return &Schedule{Seed: s.Seed, Opts: s.Opts, Steps: steps}, last
}
