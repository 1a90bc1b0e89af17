package shrink

import (
	"slices"
	"testing"
	"time"
)

// A failure that needs steps 3 and 7 shrinks to exactly them.
func TestStepsKeepsWhatTheFailureNeeds(t *testing.T) {
	steps := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	fails := func(s []int) bool { return slices.Contains(s, 3) && slices.Contains(s, 7) }
	if got := Steps(steps, fails, time.Now().Add(time.Minute)); !slices.Equal(got, []int{3, 7}) {
		t.Fatalf("shrunk to %v, want [3 7]", got)
	}
	if !slices.Equal(steps, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("the input was modified: %v", steps)
	}
}
