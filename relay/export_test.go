package relay

import "github.com/xds-relay/xds-relay/upstream"

// The tests check, as every relay closes, that it left no empty entry.
func init() { checkEntries = true }

// HoldApply has f called with each upstream event before the relay applies
// it; nil: none.
func HoldApply(f func(upstream.Update)) {
	if f == nil {
		applying.Store(nil)
		return
	}
	applying.Store(&f)
}
