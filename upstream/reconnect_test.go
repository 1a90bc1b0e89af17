package upstream_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// After the server stops and restarts on the same port, the client
// reconnects and re-subscribes everything on the new stream: node on the
// first request, every type with its names, empty version and nonce.
func TestSotWReconnectResubscribes(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("c1"), cluster("c2"))
	cp.UpdateResources(keying.ListenerType, listener("l1"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())

	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Subscribe(keying.ListenerType, "l1")
	cur, ucur, lcur, scur := 0, 0, 0, 0
	rec.nextState(t, &scur, cp.Addr(), true)
	rec.nextUpdate(t, &ucur, keying.ClusterType)
	rec.nextUpdate(t, &lcur, keying.ListenerType)

	cp.Stop()
	if ev := rec.nextState(t, &scur, cp.Addr(), false); ev.err == nil {
		t.Errorf("disconnect reported without a cause")
	}
	cp.Restart()
	rec.nextState(t, &scur, cp.Addr(), true)

	var first *upstream.Update
	got := map[string][]string{}
	for range 2 {
		r := cp.NextRequest(t, &cur, "request on the new stream", func(r xdstest.Request) bool { return r.StreamID > 1 && r.SotW != nil })
		if first == nil {
			if !proto.Equal(r.SotW.GetNode(), testNode()) {
				t.Errorf("first request on the new stream has node %v", r.SotW.GetNode())
			}
			first = &upstream.Update{}
		} else if r.SotW.GetNode() != nil {
			t.Errorf("second request on the new stream carries the node")
		}
		if r.SotW.GetVersionInfo() != "" || r.SotW.GetResponseNonce() != "" {
			t.Errorf("resubscription for %s has version/nonce %q/%q, want empty",
				r.SotW.GetTypeUrl(), r.SotW.GetVersionInfo(), r.SotW.GetResponseNonce())
		}
		got[r.SotW.GetTypeUrl()] = r.SotW.GetResourceNames()
	}
	// A wildcard alone goes out as the legacy empty list.
	if ct, ok := got[keying.ClusterType]; !ok || len(ct) != 0 || !slices.Equal(got[keying.ListenerType], []string{"l1"}) {
		t.Errorf("resubscriptions = %q", got)
	}
	u := rec.nextUpdate(t, &ucur, keying.ClusterType)
	if !slices.Equal(sorted(names(u)), []string{"c1", "c2"}) || len(u.Removed) != 0 {
		t.Errorf("cluster update after reconnect = %q removed %q", names(u), u.Removed)
	}
}

// Close while the client backs off from an unreachable server returns at
// once and leaves no goroutine behind (goleak in TestMain); a second Close
// is a no-op.
func TestCloseDuringBackoff(t *testing.T) {
	cp := startControlPlane(t, false)
	addr := cp.Addr()
	cp.Stop()
	backingOff := make(chan struct{}, 1)
	c := newClientCfg(t, upstream.Config{Backoff: func(int) time.Duration {
		select {
		case backingOff <- struct{}{}:
		default:
		}
		return time.Hour
	}}, &recorder{}, addr)
	c.Subscribe(keying.ClusterType, "a")
	select {
	case <-backingOff:
	case <-time.After(xdstest.WaitTimeout):
		t.Fatal("timed out waiting for the first backoff")
	}
	st := c.Status()
	if st.Server != addr || st.LastError == "" {
		t.Errorf("status = %+v, want server %s and the last error", st, addr)
	}
	c.Close()
	c.Close()
}

// A client that was never used dials nothing and reports idle.
func TestIdleUntilSubscribe(t *testing.T) {
	cp := startControlPlane(t, false)
	c := newClient(t, upstream.ModeSotW, &recorder{}, cp.Addr())
	if st := c.Status(); st.State != upstream.StateIdle {
		t.Errorf("state = %q, want idle", st.State)
	}
	c.Subscribe(keying.ClusterType, "a")
	c.Unsubscribe(keying.ClusterType, "a")
	c.Close()
	// Whether or not [a] made it out before the Unsubscribe, no stream may
	// start a type with an empty list (a legacy wildcard for CDS).
	requested := map[int64]bool{}
	for _, r := range cp.Requests() {
		if r.SotW == nil {
			continue
		}
		if len(r.SotW.GetResourceNames()) == 0 && !requested[r.StreamID] {
			t.Errorf("first request of a stream has no names: %v", r.SotW)
		}
		requested[r.StreamID] = true
	}
}
