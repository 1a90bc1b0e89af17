package upstream_test

import (
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// With several servers, the client uses the first reachable one, moves to
// the next when it is down, and returns to the first as soon as it is
// reachable again (gRFC A71).
func TestFallbackAndReturnToPrimary(t *testing.T) {
	primary := startControlPlane(t, false)
	secondary := startControlPlane(t, false)
	for _, cp := range []*controlPlane{primary, secondary} {
		cp.set(t, keying.ClusterType, cluster("a"))
	}
	primary.stop()

	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeSotW, PrimaryRetryInterval: 20 * time.Millisecond},
		rec, primary.addr, secondary.addr)
	c.Subscribe(keying.ClusterType, "a")
	scur, ucur := 0, 0
	rec.nextState(t, &scur, secondary.addr, true)
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); u.Server != secondary.addr {
		t.Errorf("update from %q, want the secondary %q", u.Server, secondary.addr)
	}

	primary.restart()
	if ev := rec.nextState(t, &scur, secondary.addr, false); ev.err == nil {
		t.Errorf("switch back reported without a cause")
	}
	rec.nextState(t, &scur, primary.addr, true)
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); u.Server != primary.addr {
		t.Errorf("update from %q, want the primary %q", u.Server, primary.addr)
	}
	cur := 0
	primary.nextSotW(t, &cur, keying.ClusterType)
	if st := c.Status(); st.Server != primary.addr || st.State != upstream.StateConnected {
		t.Errorf("status = %+v, want connected to the primary", st)
	}

	// The primary goes away again: back to the secondary.
	primary.stop()
	rec.nextState(t, &scur, secondary.addr, true)
}
