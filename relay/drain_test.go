package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// drainFleet starts a relay with the drain window, and n clients that watch
// every cluster; it returns them in the order they connected.
func drainFleet(t *testing.T, window time.Duration, n int) (*xdstest.Relay, []*xdstest.ADSClient) {
	t.Helper()
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Shutdown.DrainWindow = window }))
	var clients []*xdstest.ADSClient
	for i := range n {
		c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: fmt.Sprintf("n%d", i)})
		c.Subscribe(resource.ClusterType, "*")
		c.Ack(c.RecvType(resource.ClusterType))
		clients = append(clients, c)
	}
	return r, clients
}

// ended records when each client's stream ended and with what.
type ended struct {
	mu    sync.Mutex
	at    map[int]time.Time
	codes map[int]codes.Code
	wg    sync.WaitGroup
}

func watchEnds(clients []*xdstest.ADSClient) *ended {
	e := &ended{at: map[int]time.Time{}, codes: map[int]codes.Code{}}
	for i, c := range clients {
		e.wg.Go(func() {
			err := c.Err()
			e.mu.Lock()
			e.at[i], e.codes[i] = time.Now(), status.Code(err)
			e.mu.Unlock()
		})
	}
	return e
}

// readyz is what the admin /readyz answers for r's Readiness: the code and
// the body.
func readyz(r *relay.Relay) (int, string) {
	ok, why := r.Readiness()
	if !ok {
		return http.StatusServiceUnavailable, why + "\n"
	}
	return http.StatusOK, why + "\n"
}

// Contract (Shutdown): /readyz turns 503 at once, the open streams end with
// UNAVAILABLE spread over shutdown.drain_window, and Shutdown returns as soon
// as none is left, long before its deadline. (The spread is checked by a
// lower bound, which timers guarantee; the order the clients observe their
// ends in depends on scheduling, so it is not checked.)
func TestShutdownDrainsOverTheWindow(t *testing.T) {
	const window, n = 400 * time.Millisecond, 4
	r, clients := drainFleet(t, window, n)
	if code, body := readyz(r.Relay); code != http.StatusOK {
		t.Fatalf("/readyz before the drain = %d %q", code, body)
	}
	e := watchEnds(clients)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		r.Shutdown(ctx)
		close(done)
	}()
	xdstest.Eventually(t, func() bool { return !r.Ready() }, "not ready while draining", nil)
	if code, body := readyz(r.Relay); code != http.StatusServiceUnavailable || body != "draining: xDS streams are being moved to other replicas\n" {
		t.Errorf("/readyz while draining = %d %q, want 503 draining", code, body)
	}
	select {
	case <-done:
	case <-time.After(xdstest.WaitTimeout):
		t.Fatal("Shutdown did not return")
	}
	if ctx.Err() != nil {
		t.Error("Shutdown waited for its deadline; want it to return when no stream is left")
	}
	e.wg.Wait()
	for i := range n {
		if e.codes[i] != codes.Unavailable {
			t.Errorf("client %d ended with %v, want UNAVAILABLE", i, e.codes[i])
		}
	}
	// The i-th of n streams is not ended before i×window/n: the last one
	// ended after three quarters of the window, not with the others.
	if last := e.at[n-1].Sub(start); last < window*(n-1)/n {
		t.Errorf("the last stream ended %v after the start of the drain, before its slot at %v", last, window*(n-1)/n)
	}
}

// With a drain window longer than the deadline, Shutdown ends the rest at
// its deadline.
func TestShutdownDeadline(t *testing.T) {
	r, clients := drainFleet(t, time.Hour, 3)
	e := watchEnds(clients)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r.Shutdown(ctx)
	e.wg.Wait()
	for i := range clients {
		if c := e.codes[i]; c != codes.Unavailable {
			t.Errorf("client %d ended with %v, want UNAVAILABLE", i, c)
		}
	}
}

// StartDrain (POST /drain) takes the relay out of service until EndDrain
// (DELETE /drain): readiness 503, the open streams ended with UNAVAILABLE,
// new streams refused with UNAVAILABLE while the listener stays open. After
// EndDrain the relay is ready again and serves new streams. The admin API's
// side is admin's TestDrainEndpoint; the gRPC health status is
// TestHealthFollowsReadiness.
func TestReversibleDrain(t *testing.T) {
	r, clients := drainFleet(t, 0, 2)
	e := watchEnds(clients)

	if !r.StartDrain() {
		t.Fatal("StartDrain() = false on a serving relay")
	}
	e.wg.Wait()
	for i := range clients {
		if c := e.codes[i]; c != codes.Unavailable {
			t.Errorf("client %d ended with %v, want UNAVAILABLE", i, c)
		}
	}
	if code, body := readyz(r.Relay); code != http.StatusServiceUnavailable || !strings.Contains(body, "DELETE /drain") {
		t.Errorf("/readyz while drained = %d %q, want 503 naming DELETE /drain", code, body)
	}
	refused := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "late"})
	if err := refused.Err(); status.Code(err) != codes.Unavailable {
		t.Errorf("a new stream while drained ended with %v, want UNAVAILABLE", err)
	}
	if r.StartDrain() {
		t.Error("a second StartDrain() = true, want false: the drain lasts")
	}

	if !r.EndDrain() {
		t.Fatal("EndDrain() = false while drained")
	}
	if code, body := readyz(r.Relay); code != http.StatusOK {
		t.Errorf("/readyz after EndDrain = %d %q, want 200", code, body)
	}
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "back"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1")
	if r.EndDrain() {
		t.Error("a second EndDrain() = true, want false: nothing drains")
	}
}

// A shutdown is never undone: EndDrain during it changes nothing, and a
// drain begun before it does not end it.
func TestShutdownIsOneWay(t *testing.T) {
	r, clients := drainFleet(t, time.Minute, 1)
	e := watchEnds(clients)
	r.StartDrain()
	r.StopServing()
	r.EndDrain()
	if r.Ready() || !r.Draining() {
		t.Errorf("EndDrain during a shutdown: ready %v, draining %v; want not ready, draining", r.Ready(), r.Draining())
	}
	if r.StartDrain() {
		t.Error("StartDrain() = true during a shutdown")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r.Shutdown(ctx)
	e.wg.Wait()
}
