package upstream_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// connectHook is a recorder that runs onConnect, once, when the client
// connects: after the new stream starts, before its first request.
type connectHook struct {
	*recorder
	once      sync.Once
	onConnect func()
}

func (h *connectHook) OnState(server string, connected bool, err error) {
	if connected {
		h.once.Do(h.onConnect)
	}
	h.recorder.OnState(server, connected, err)
}

// A name the relay still caches, forgotten (Forget) as a new Delta stream
// starts — its subscription by name ended, the wildcard still covers it, the
// relay keeps it unsure — is declared in the stream's first request, which
// has the server say whether it is gone: only an evicted name is left out.
// Left out, the server never spoke of it again, and a listener deleted while
// the relay was away stayed in its wildcard set for good (soak seed 570443).
func TestForgottenNameStillCachedIsDeclaredOnANewStream(t *testing.T) {
	for _, when := range []string{"as the stream starts", "as its versions are read"} {
		t.Run(when, func(t *testing.T) {
			cp := startControlPlane(t, false)
			cp.UpdateResources(keying.ListenerType, listener("l4")) // l6 deleted while the relay was away
			var c *upstream.Client
			forget := func() {
				c.Unsubscribe(keying.ListenerType, "l6")
				c.Forget(keying.ListenerType, "l6")
			}
			rec := &connectHook{recorder: &recorder{}, onConnect: func() {}}
			var reading sync.Once
			cfg := upstream.Config{Mode: upstream.ModeDelta, InitialVersions: func(string) map[string]string {
				if when == "as its versions are read" {
					reading.Do(forget)
				}
				return map[string]string{"l4": "v0", "l6": "v0"} // the relay's cache
			}}
			if when == "as the stream starts" {
				rec.onConnect = forget
			}
			c = newClientCfg(t, cfg, rec, cp.Addr())
			c.Subscribe(keying.ListenerType, keying.Wildcard, "l6")
			cur, ucur := 0, 0
			if req := cp.NextDelta(t, &cur, keying.ListenerType); req.GetInitialResourceVersions()["l6"] == "" {
				t.Fatalf("first request %v: want l6 declared", req)
			}
			for {
				if u := rec.nextUpdate(t, &ucur, keying.ListenerType); slices.Contains(u.Removed, "l6") {
					return
				}
			}
		})
	}
}
