package lrs_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/lrs"
)

// While the upstream is away the aggregate accumulates, and reaches it on
// its return: nothing lost.
func TestOutageAccumulates(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there until the upstream starts
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: addr}}, FirstAnswerWait: 50 * time.Millisecond})
	c := r.client(t, "a")
	c.next(t) // the relay's default
	want := sums{}
	for i := range 5 {
		s := report("c1", "z1", uint64(i+1), 1, uint64(i+2), 0)
		want.add(s)
		c.send(t, s)
	}
	u := xdstest.StartLRS(t, &xdstest.LRSUpstream{Listen: addr})
	waitFor(t, u, "the reports made during the outage", func(stats []*endpointv3.ClusterStats) bool {
		got := sums{}
		got.add(stats...)
		return cmp.Equal(want, got)
	})
}

// The load follows the relay's xDS stream to another server: each report
// goes to one of them, none twice.
func TestFollowsCurrentServer(t *testing.T) {
	a := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	b := xdstest.StartLRS(t, &xdstest.LRSUpstream{})
	var current atomic.Value
	current.Store(a.Addr())
	r := startRelay(t, lrs.Options{Upstreams: []lrs.Upstream{{URI: a.Addr()}, {URI: b.Addr()}},
		Current: func(string, string) string { return current.Load().(string) }})
	c := r.client(t, "a")
	want := sums{}
	send := func(n uint64) {
		s := report("c1", "z1", n, 0, n, 0)
		want.add(s)
		c.send(t, s)
	}
	send(3)
	waitFor(t, a, "the first report at the first server", func(stats []*endpointv3.ClusterStats) bool { return len(stats) > 0 })
	current.Store(b.Addr())
	send(4)
	waitFor(t, b, "the second report at the second server", func(stats []*endpointv3.ClusterStats) bool { return len(stats) > 0 })
	_, sa := a.Received()
	_, sb := b.Received()
	got := sums{}
	got.add(append(sa, sb...)...)
	if !cmp.Equal(want, got) {
		t.Errorf("the servers received %v together, want %v", got, want)
	}
}
