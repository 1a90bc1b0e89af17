package xdstest

import (
	"net"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/relay"
)

// RelayOption adjusts the config of StartRelay.
type RelayOption func(*config.Config)

// WithLinger sets upstream.linger.
func WithLinger(d time.Duration) RelayOption {
	return func(c *config.Config) { c.Upstream.Linger = d }
}

// Relay is an xds-relay under test.
type Relay struct {
	*relay.Relay
	addr string
}

// Addr is the relay's downstream xDS address.
func (r *Relay) Addr() string { return r.addr }

// StartRelay starts a relay on 127.0.0.1:0 whose default upstream is
// upstreamAddr. It is closed when the test ends.
func StartRelay(tb testing.TB, upstreamAddr string, opts ...RelayOption) *Relay {
	tb.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = ""
	cfg.Node.ID = "xds-relay-test"
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: upstreamAddr}}
	for _, o := range opts {
		o(cfg)
	}
	r, err := relay.New(cfg, zaptest.NewLogger(tb).Named("relay"))
	if err != nil {
		tb.Fatalf("relay.New: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Serve(lis); err != nil {
			tb.Errorf("relay.Serve: %v", err)
		}
	}()
	tb.Cleanup(func() {
		r.Close()
		<-done
	})
	return &Relay{Relay: r, addr: lis.Addr().String()}
}
