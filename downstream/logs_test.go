package downstream

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// 10,000 clients connecting at once write a sampled handful of connect lines,
// not 10,000.
func TestClientLinesSampled(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	l := newServerLogs(zap.New(obs))
	defer l.held.Close()
	for i := range 10000 {
		l.clients.Info("client connected", zap.Int("stream", i))
	}
	// Per second: the first clientLinesFirst, then every
	// clientLinesThereafter-th; the loop takes far less than the seconds
	// this bound allows.
	if n := logs.Len(); n < clientLinesFirst || n >= 1000 {
		t.Errorf("%d connect lines for 10000 connects, want at least %d and far fewer than 10000", n, clientLinesFirst)
	}
}
