package upstream_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// After the server stops and restarts on the same port, the client
// reconnects and re-subscribes everything on the new stream: node on the
// first request, every type with its names, empty version and nonce.
func TestSotWReconnectResubscribes(t *testing.T) {
	cp := startControlPlane(t, false)
	cp.set(t, keying.ClusterType, cluster("c1"), cluster("c2"))
	cp.set(t, keying.ListenerType, listener("l1"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.addr)

	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Subscribe(keying.ListenerType, "l1")
	cur, ucur, lcur, scur := 0, 0, 0, 0
	rec.nextState(t, &scur, cp.addr, true)
	rec.nextUpdate(t, &ucur, keying.ClusterType)
	rec.nextUpdate(t, &lcur, keying.ListenerType)

	cp.stop()
	if ev := rec.nextState(t, &scur, cp.addr, false); ev.err == nil {
		t.Errorf("disconnect reported without a cause")
	}
	cp.restart()
	rec.nextState(t, &scur, cp.addr, true)

	var first *upstream.Update
	got := map[string][]string{}
	for range 2 {
		r := cp.next(t, &cur, "request on the new stream", func(r request) bool { return r.stream > 1 && r.sotw != nil })
		if first == nil {
			if !proto.Equal(r.sotw.GetNode(), testNode()) {
				t.Errorf("first request on the new stream has node %v", r.sotw.GetNode())
			}
			first = &upstream.Update{}
		} else if r.sotw.GetNode() != nil {
			t.Errorf("second request on the new stream carries the node")
		}
		if r.sotw.GetVersionInfo() != "" || r.sotw.GetResponseNonce() != "" {
			t.Errorf("resubscription for %s has version/nonce %q/%q, want empty",
				r.sotw.GetTypeUrl(), r.sotw.GetVersionInfo(), r.sotw.GetResponseNonce())
		}
		got[r.sotw.GetTypeUrl()] = r.sotw.GetResourceNames()
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
	addr := cp.addr
	cp.stop()
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
	case <-time.After(waitTimeout):
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
	c := newClient(t, upstream.ModeSotW, &recorder{}, cp.addr)
	if st := c.Status(); st.State != upstream.StateIdle {
		t.Errorf("state = %q, want idle", st.State)
	}
	c.Subscribe(keying.ClusterType, "a")
	c.Unsubscribe(keying.ClusterType, "a")
	c.Close()
	// Whether or not [a] made it out before the Unsubscribe, no stream may
	// start a type with an empty list (a legacy wildcard for CDS).
	requested := map[int]bool{}
	for _, r := range cp.requests() {
		if r.sotw == nil {
			continue
		}
		if len(r.sotw.GetResourceNames()) == 0 && !requested[r.stream] {
			t.Errorf("first request of a stream has no names: %v", r.sotw)
		}
		requested[r.stream] = true
	}
}
