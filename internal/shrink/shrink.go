// Package shrink shortens a failing sequence of steps (the oracles'
// schedules) by deleting chunks of it while it still fails.
package shrink

import (
	"slices"
	"time"
)

// Steps returns the shortest sequence found that still fails: it deletes
// chunks of halving size from steps, keeping each deletion after which
// fails reports true, until no chunk can go or deadline passes.
func Steps[S any](steps []S, fails func([]S) bool, deadline time.Time) []S {
	best := steps
	for chunk := len(best) / 2; chunk >= 1 && time.Now().Before(deadline); {
		shrunk := false
		for i := 0; i < len(best) && time.Now().Before(deadline); i += chunk {
			c := slices.Delete(slices.Clone(best), i, min(i+chunk, len(best)))
			if fails(c) {
				best, shrunk = c, true
				i -= chunk
			}
		}
		if !shrunk {
			chunk /= 2
		}
	}
	return best
}
