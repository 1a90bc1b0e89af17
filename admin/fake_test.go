package admin_test

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/gateway"
	"github.com/xds-relay/xds-relay/lrs"
	"github.com/xds-relay/xds-relay/relay"
)

// fakeRelay is an admin.Source with fixed answers, so that the status page
// and the settings endpoints are tested on what they are given, without a
// relay. Set its fields before serving it; only StartDrain and EndDrain change it after.
type fakeRelay struct {
	cfg     *config.Config
	log     *zap.Logger
	reg     *prometheus.Registry
	ready   bool
	reason  string
	clients []relay.ClientInfo
	ups     []relay.UpstreamInfo
	cache   []relay.CacheEntryInfo
	lrs     lrs.Status

	draining atomic.Bool
}

var _ admin.Source = (*fakeRelay)(nil)

// newFake is an idle relay of cfg as relay.New leaves it before Serve: not
// ready, no stream, the default servers' client not yet attempted, and an
// empty registry.
func newFake(t *testing.T, cfg *config.Config) *fakeRelay {
	return &fakeRelay{
		cfg:    cfg,
		log:    zaptest.NewLogger(t),
		reg:    prometheus.NewRegistry(),
		reason: "starting: the xDS listener does not serve yet",
		ups:    []relay.UpstreamInfo{{State: "idle"}},
	}
}

func (f *fakeRelay) Readiness() (bool, string) {
	if f.draining.Load() {
		return false, "draining"
	}
	return f.ready, f.reason
}

func (f *fakeRelay) StartDrain() bool { return !f.draining.Swap(true) }
func (f *fakeRelay) EndDrain() bool   { return f.draining.Swap(false) }

func (f *fakeRelay) Config() *config.Config                              { return f.cfg }
func (f *fakeRelay) Logger() *zap.Logger                                 { return f.log }
func (f *fakeRelay) Registry() *prometheus.Registry                      { return f.reg }
func (f *fakeRelay) DebugCache(relay.CacheFilter) []relay.CacheEntryInfo { return f.cache }
func (f *fakeRelay) DebugClients(string) []relay.ClientInfo              { return f.clients }
func (f *fakeRelay) DebugUpstreams() []relay.UpstreamInfo                { return f.ups }
func (f *fakeRelay) DebugRollouts() []relay.RolloutInfo                  { return nil }
func (f *fakeRelay) DebugGateway(string) gateway.DebugInfo               { return gateway.DebugInfo{} }
func (f *fakeRelay) DebugLRS() lrs.Status                                { return f.lrs }

func (f *fakeRelay) DebugClientsPage(relay.ClientQuery) relay.ClientPage {
	page := relay.ClientPage{Total: len(f.clients), Streams: []relay.PagedClient{}}
	for _, c := range f.clients {
		page.Streams = append(page.Streams, relay.PagedClient{ClientInfo: c})
	}
	return page
}
