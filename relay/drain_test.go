package relay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Graceful drain: /readyz turns 503 at once, open streams are served until
// the drain deadline, then closed; Shutdown returns.
func TestGracefulDrain(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr())
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	c.Ack(c.RecvType(resource.ClusterType))

	readyz := func() int {
		rec := httptest.NewRecorder()
		r.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	if got := readyz(); got != http.StatusOK {
		t.Fatalf("/readyz before the drain = %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		r.Shutdown(ctx)
		close(done)
	}()
	wait, stop := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer stop()
	for r.Ready() {
		select {
		case <-wait.Done():
			t.Fatal("still ready while draining")
		case <-time.After(time.Millisecond):
		}
	}
	if got := readyz(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while draining = %d, want 503", got)
	}
	select {
	case <-done:
	case <-wait.Done():
		t.Fatal("Shutdown did not return after its deadline")
	}
	if err := c.Err(); err == nil {
		t.Fatal("the stream outlived the drain")
	}
}
