package relay_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// countingWatcher is a downstream.Watcher that records the Views it is told
// of; block, when set, holds its Notify until closed.
type countingWatcher struct {
	id    uint64
	block chan struct{}

	mu      sync.Mutex
	changes map[uint64]int // View seq → Notify calls without force
	views   chan *downstream.View
}

func newCountingWatcher(id uint64) *countingWatcher {
	return &countingWatcher{id: id, changes: map[uint64]int{}, views: make(chan *downstream.View, 1000)}
}

func (w *countingWatcher) Notify(v *downstream.View, force []string) {
	if w.block != nil {
		<-w.block
	}
	w.mu.Lock()
	if force == nil {
		w.changes[v.Seq]++
	}
	w.mu.Unlock()
	w.views <- v
}
func (w *countingWatcher) NotifyRollout(v *downstream.View, _ downstream.Rollout, _ bool) {
	w.Notify(v, nil)
}
func (w *countingWatcher) Wake()      {}
func (w *countingWatcher) ID() uint64 { return w.id }

// wait returns the first View told of that matches, within
// xdstest.WaitTimeout.
func (w *countingWatcher) wait(t *testing.T, match func(*downstream.View) bool) *downstream.View {
	t.Helper()
	deadline := time.After(xdstest.WaitTimeout)
	for {
		select {
		case v := <-w.views:
			if match(v) {
				return v
			}
		case <-deadline:
			t.Fatal("no matching View")
		}
	}
}

func edsClusters(n int, eds string) xdstest.Resources {
	var cs []types.Resource
	for i := range n {
		cs = append(cs, xdstest.EDSCluster(fmt.Sprintf("c%02d", i), eds))
	}
	return xdstest.Resources{resource.ClusterType: cs}
}

// A change of many names notifies a stream that watches all of them — by
// name and by the wildcard — once.
func TestChangeNotifiesAStreamOnce(t *testing.T) {
	const n = 50
	up := xdstest.StartUpstream(t)
	up.SetResources(edsClusters(n, "a"))
	r := xdstest.StartRelay(t, up.Addr())
	w := newCountingWatcher(1 << 40)
	if err := r.Bind(w, &core.Node{Id: "counted"}); err != nil {
		t.Fatal(err)
	}
	defer r.Cancel(w)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("c%02d", i))
	}
	on := true
	r.Watch(w, resource.ClusterType, downstream.Change{Add: names, Wildcard: &on})
	has := func(eds string) func(*downstream.View) bool {
		return func(v *downstream.View) bool { return len(v.Resources) == n && v.Complete && hasEDS(v, eds) }
	}
	w.wait(t, has("a"))
	up.SetResources(edsClusters(n, "b"))
	v := w.wait(t, has("b"))
	if len(v.Changed) != n {
		t.Fatalf("the change holds %d names, want %d in one View", len(v.Changed), n)
	}
	time.Sleep(quiet / 3) // a second Notify would come at once
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.changes[v.Seq]; got != 1 {
		t.Fatalf("the stream was notified %d times of one change of %d names it watches, want once", got, n)
	}
}

// The fan-out runs outside the relay's lock: while a stream's Notify does
// not return, the relay still answers other streams' subscriptions and the
// admin views, and the stuck delivery does not lose the stream its change.
func TestFanOutOutsideTheRelayLock(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(edsClusters(3, "a"))
	r := xdstest.StartRelay(t, up.Addr())
	slow := newCountingWatcher(1 << 41)
	if err := r.Bind(slow, &core.Node{Id: "slow"}); err != nil {
		t.Fatal(err)
	}
	defer r.Cancel(slow)
	on := true
	r.Watch(slow, resource.ClusterType, downstream.Change{Wildcard: &on})
	slow.wait(t, func(v *downstream.View) bool { return hasEDS(v, "a") })
	before := cachedVersion(r, "c00")
	slow.block = make(chan struct{}) // its Notify now waits
	up.SetResources(edsClusters(3, "b"))

	done := make(chan struct{})
	go func() {
		defer close(done)
		other := newCountingWatcher(1 << 42)
		if err := r.Bind(other, &core.Node{Id: "other"}); err != nil {
			t.Error(err)
			return
		}
		defer r.Cancel(other)
		// Once the change is in the cache, a new subscriber is answered
		// and the admin views answer, while the slow stream's Notify waits.
		deadline := time.Now().Add(xdstest.WaitTimeout)
		for cachedVersion(r, "c00") == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		r.Watch(other, resource.ClusterType, downstream.Change{Wildcard: &on})
		other.wait(t, func(v *downstream.View) bool { return hasEDS(v, "b") })
		_ = r.DebugUpstreams()
	}()
	select {
	case <-done:
	case <-time.After(xdstest.WaitTimeout):
		t.Fatal("a stream's Notify held up the relay: no other subscription or admin view was answered")
	}
	close(slow.block)
	slow.wait(t, func(v *downstream.View) bool { return hasEDS(v, "b") })
}

func hasEDS(v *downstream.View, eds string) bool {
	r, ok := v.Resources["c00"]
	if !ok {
		return false
	}
	var a anypb.Any
	var c cluster.Cluster
	if proto.Unmarshal(r.Any, &a) != nil || a.UnmarshalTo(&c) != nil {
		return false
	}
	return c.GetEdsClusterConfig().GetServiceName() == eds
}

// cachedVersion is the version of the cluster name in r's cache.
func cachedVersion(r *xdstest.Relay, name string) string {
	for _, e := range r.DebugCache(relay.CacheFilter{Type: resource.ClusterType, NamePrefix: name}) {
		if e.Name == name {
			return e.Version
		}
	}
	return ""
}
