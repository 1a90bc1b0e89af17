package xdstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/relay"
)

// Relay is an xds-relay serving on 127.0.0.1:0 for a test. The embedded
// *relay.Relay gives access to its debug views and registry.
//
// Note: this makes xdstest import relay, so only external (`_test`) packages
// of relay, upstream, downstream and keying may import xdstest.
type Relay struct {
	*relay.Relay

	// Set at creation, read-only.
	addr string
	done chan error // receives Serve's result

	closeOnce sync.Once
}

// RelayOption adjusts the relay's config before it starts.
type RelayOption func(*config.Config)

// WithConfig lets a test change any field of the config.
func WithConfig(f func(*config.Config)) RelayOption { return RelayOption(f) }

// RelayConfig is the config StartRelay uses: the defaults, no admin
// listener, node "xds-relay-test"/"xds-relay", one plaintext upstream server.
func RelayConfig(listen, upstreamAddr string) *config.Config {
	cfg := config.Default()
	cfg.Listen = listen
	cfg.Admin = ""
	cfg.Node = config.Node{ID: "xds-relay-test", Cluster: "xds-relay"}
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: upstreamAddr}}
	cfg.Cache.MaxUnreferenced = 1000
	return cfg
}

// StartRelay starts a relay in front of the upstream at upstreamAddr, with
// RelayConfig adjusted by opts and a logger writing to the test log. It is
// closed when the test ends; a Serve error fails the test then.
func StartRelay(tb testing.TB, upstreamAddr string, opts ...RelayOption) *Relay {
	tb.Helper()
	return StartRelayLogged(tb, zap.NewNop(), upstreamAddr, opts...)
}

// StartRelayLogged is StartRelay with the relay logging to log (for example
// zaptest.NewLogger(t)).
func StartRelayLogged(tb testing.TB, log *zap.Logger, upstreamAddr string, opts ...RelayOption) *Relay {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("xdstest: relay listen: %v", err)
	}
	cfg := RelayConfig(lis.Addr().String(), upstreamAddr)
	for _, o := range opts {
		o(cfg)
	}
	r, err := relay.New(cfg, log)
	if err != nil {
		_ = lis.Close()
		tb.Fatalf("xdstest: relay.New: %v", err)
	}
	tr := &Relay{Relay: r, addr: lis.Addr().String(), done: make(chan error, 1)}
	go func() { tr.done <- r.Serve(lis) }()
	tb.Cleanup(func() {
		if err := tr.Close(); err != nil {
			tb.Errorf("xdstest: relay: %v", err)
		}
	})
	return tr
}

// Addr is the relay's downstream xDS address.
func (r *Relay) Addr() string { return r.addr }

// Close closes the relay and waits (WaitTimeout) for Serve to return; it
// returns Serve's error. Idempotent: later calls return nil.
func (r *Relay) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.Relay.Close()
		select {
		case err = <-r.done:
		case <-time.After(WaitTimeout):
			err = errTimeout("relay Serve did not return after Close")
		}
	})
	return err
}

type errTimeout string

func (e errTimeout) Error() string {
	return "xdstest: " + string(e) + " within " + WaitTimeout.String()
}
