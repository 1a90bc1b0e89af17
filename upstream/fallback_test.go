package upstream_test

import (
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// With several servers, the client uses the first reachable one, moves to
// the next when it is down, and returns to the first as soon as it is
// reachable again (gRFC A71).
func TestFallbackAndReturnToPrimary(t *testing.T) {
	primary := startControlPlane(t, false)
	secondary := startControlPlane(t, false)
	for _, cp := range []*xdstest.Upstream{primary, secondary} {
		cp.UpdateResources(keying.ClusterType, cluster("a"))
	}
	primary.Stop()

	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeSotW, PrimaryRetryInterval: 20 * time.Millisecond},
		rec, primary.Addr(), secondary.Addr())
	c.Subscribe(keying.ClusterType, "a")
	scur, ucur := 0, 0
	rec.nextState(t, &scur, secondary.Addr(), true)
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); u.Server != secondary.Addr() {
		t.Errorf("update from %q, want the secondary %q", u.Server, secondary.Addr())
	}
	if !c.OnFallback() {
		t.Error("OnFallback() = false on the secondary")
	}

	primary.Restart()
	if ev := rec.nextState(t, &scur, secondary.Addr(), false); ev.err == nil {
		t.Errorf("switch back reported without a cause")
	}
	rec.nextState(t, &scur, primary.Addr(), true)
	if u := rec.nextUpdate(t, &ucur, keying.ClusterType); u.Server != primary.Addr() {
		t.Errorf("update from %q, want the primary %q", u.Server, primary.Addr())
	}
	cur := 0
	primary.NextSotW(t, &cur, keying.ClusterType)
	if st := c.Status(); st.Server != primary.Addr() || st.State != upstream.StateConnected {
		t.Errorf("status = %+v, want connected to the primary", st)
	}
	if c.OnFallback() {
		t.Error("OnFallback() = true back on the primary")
	}

	// The primary goes away again: back to the secondary.
	primary.Stop()
	rec.nextState(t, &scur, secondary.Addr(), true)
}
