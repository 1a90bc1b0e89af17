package xdstest

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, failing the test with what (and the
// result of detail, if not nil) after WaitTimeout. For state reached
// asynchronously that no message signals (an upstream's subscriptions).
func Eventually(tb testing.TB, cond func() bool, what string, detail func() any) {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			if detail != nil {
				tb.Fatalf("xdstest: after %v: %s: %v", WaitTimeout, what, detail())
			}
			tb.Fatalf("xdstest: after %v: %s", WaitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
