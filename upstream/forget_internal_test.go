package upstream

import (
	"fmt"
	"slices"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// Forgotten names (Forget) and the requests that make a Delta server confirm
// them, built without a stream.

func bareDelta() *Client {
	return &Client{types: map[string]*typeState{}, mode: ModeDelta, log: zap.NewNop()}
}

// index returns the position of the first request that subscribes (sub) or
// unsubscribes n, -1 for none.
func index(reqs []*discoveryv3.DeltaDiscoveryRequest, n string, sub bool) int {
	for i, r := range reqs {
		names := r.GetResourceNamesUnsubscribe()
		if sub {
			names = r.GetResourceNamesSubscribe()
		}
		if slices.Contains(names, n) {
			return i
		}
	}
	return -1
}

// Unsubscribed, forgotten and subscribed again before the sender ran: the
// unsubscription and the subscription cancel out, so the server, which
// thinks the relay holds n, is told to unsubscribe it and then subscribe it
// again (found by a review: it was told nothing, and never sent n again).
func TestForgetBetweenUnsubscribeAndSubscribe(t *testing.T) {
	c := bareDelta()
	c.Subscribe(keying.ClusterType, "n")
	if reqs, _, _ := c.takeDelta(nil); index(reqs, "n", true) < 0 {
		t.Fatalf("first requests %v", reqs)
	}
	c.Unsubscribe(keying.ClusterType, "n")
	c.Forget(keying.ClusterType, "n")
	c.Subscribe(keying.ClusterType, "n")
	reqs, _, _ := c.takeDelta(nil)
	if u, s := index(reqs, "n", false), slices.IndexFunc(reqs, func(r *discoveryv3.DeltaDiscoveryRequest) bool {
		return slices.Contains(r.GetResourceNamesSubscribe(), "n") && r.GetResponseNonce() == ""
	}); u < 0 || s < u {
		t.Fatalf("requests %v: want n unsubscribed, then subscribed", reqs)
	}
}

// Names forgotten while an ignored answer's names wait for confirmation
// (they fill only forget: see onDeltaResponse): the relay crashed (found by
// the oracle's soak: a panic, assignment to entry in nil map).
func TestForgetAfterAnIgnoredAnswer(t *testing.T) {
	c := bareDelta()
	c.Subscribe(keying.ClusterType, "*")
	c.takeDelta(nil)
	c.types[keying.ClusterType].forget = map[string]struct{}{"ignored": {}} // as an ignored answer leaves it
	c.Unsubscribe(keying.ClusterType, "*")
	c.Forget(keying.ClusterType, "member")
	reqs, _, _ := c.takeDelta(nil)
	if index(reqs, "member", false) < 0 {
		t.Fatalf("requests %v: want member unsubscribed (told)", reqs)
	}
}

// Forgotten names are unsubscribed at once and kept for their confirmation,
// up to maxForgotten.
func TestForgottenNamesBounded(t *testing.T) {
	c := bareDelta()
	c.Subscribe(keying.EndpointType, "keep")
	c.takeDelta(nil)
	for round := range 6 {
		for i := range 2000 {
			c.Forget(keying.EndpointType, fmt.Sprintf("e-%d-%d", round, i))
		}
		reqs, _, _ := c.takeDelta(nil)
		if index(reqs, fmt.Sprintf("e-%d-0", round), false) < 0 {
			t.Fatalf("round %d: the forgotten names were not unsubscribed: %v", round, reqs)
		}
	}
	if n := len(c.types[keying.EndpointType].forget); n > maxForgotten {
		t.Fatalf("%d forgotten names kept, want at most %d", n, maxForgotten)
	}
}

// The wildcard covers plain names only: a forgotten TP2 key is not
// subscribed with it.
func TestForgottenTP2KeyNotConfirmedByTheWildcard(t *testing.T) {
	c := bareDelta()
	c.Subscribe(keying.ClusterType, "keep")
	c.takeDelta(nil)
	key := keying.SubscriptionKey("r", keying.CanonicalParams(map[string]string{"env": "prod"}))
	c.Forget(keying.ClusterType, key, "plain")
	c.Subscribe(keying.ClusterType, keying.Wildcard)
	reqs, _, _ := c.takeDelta(nil)
	for _, r := range reqs {
		if len(r.GetResourceLocatorsSubscribe()) > 0 {
			t.Fatalf("subscribed %v with the wildcard", r.GetResourceLocatorsSubscribe())
		}
	}
	if s, u := index(reqs, "plain", true), index(reqs, "plain", false); s < 0 || u < s {
		t.Fatalf("requests %v: want plain subscribed with * and then unsubscribed", reqs)
	}
}

// hookHandler accepts every update, running during (when set) as it
// applies one.
type hookHandler struct{ during func() }

func (h *hookHandler) OnUpdate(Update) error {
	if h.during != nil {
		h.during()
	}
	return nil
}
func (*hookHandler) OnState(string, bool, error) {}

func bareSotW(h Handler) *Client {
	return &Client{types: map[string]*typeState{}, mode: ModeSotW, log: zap.NewNop(), h: h}
}

// acceptRoutes has the SotW client c accept a response of routes, as its
// receive loop does.
func acceptRoutes(t *testing.T, c *Client, version, nonce string, names ...string) {
	t.Helper()
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: keying.RouteType, VersionInfo: version, Nonce: nonce}
	for _, n := range names {
		a, err := anypb.New(&routev3.RouteConfiguration{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	c.onSotWResponse("server", resp)
	if st := c.types[keying.RouteType]; st.nonce != nonce || st.nack != nil {
		t.Fatalf("response %s not accepted: %v", nonce, st.nack)
	}
}

// SotW: unsubscribed, forgotten (the relay dropped its copy) and subscribed
// again before the sender ran. The next request names what the last one did,
// and a SotW server answers a request whose names and version it has seen
// with nothing (the oracle's, go-control-plane's): the request must ask with
// no version, so that the server sends the name again, and the server's
// silence on it says nothing until a response answers that request (found by
// the oracle's soak, seed 373270: a REST poller's route, evicted between two
// polls, was never sent again).
func TestSotWForgetBetweenUnsubscribeAndSubscribe(t *testing.T) {
	c := bareSotW(&hookHandler{})
	c.Subscribe(keying.RouteType, "r7", "r14")
	c.takeSotW()
	acceptRoutes(t, c, "i10", "1", "r7", "r14")
	if reqs := c.takeSotW(); len(reqs) != 1 || reqs[0].GetVersionInfo() != "i10" {
		t.Fatalf("ACK %v: want version i10", reqs)
	}
	c.Unsubscribe(keying.RouteType, "r14")
	c.Forget(keying.RouteType, "r14")
	c.Subscribe(keying.RouteType, "r14")
	reqs := c.takeSotW()
	if len(reqs) != 1 || !slices.Equal(reqs[0].GetResourceNames(), []string{"r14", "r7"}) || reqs[0].GetVersionInfo() != "" {
		t.Fatalf("requests %v: want [r14 r7] asked with no version", reqs)
	}
	if c.AnsweredSince(keying.RouteType, "r14") {
		t.Fatalf("r14 answered before a response to the request that asks for it again")
	}
	acceptRoutes(t, c, "i10", "2", "r7", "r14")
	if !c.AnsweredSince(keying.RouteType, "r14") {
		t.Fatalf("r14 not answered after a response to the request that asks for it again")
	}
}

// The same while a response is applied (the relay unsubscribes, evicts and
// subscribes again under its lock, which the response's OnUpdate has just
// released): the ACK of that response, the first request the server does
// not ignore for its nonce, still asks with no version.
func TestSotWForgetWhileAResponseIsApplied(t *testing.T) {
	h := &hookHandler{}
	c := bareSotW(h)
	c.Subscribe(keying.RouteType, "r7", "r14")
	c.takeSotW()
	acceptRoutes(t, c, "i10", "1", "r7", "r14")
	c.takeSotW()
	h.during = func() {
		c.Unsubscribe(keying.RouteType, "r14")
		c.Forget(keying.RouteType, "r14")
		c.Subscribe(keying.RouteType, "r14")
		c.takeSotW() // with the nonce of the response before: the server ignores it
	}
	acceptRoutes(t, c, "i11", "2", "r7", "r14")
	h.during = nil
	reqs := c.takeSotW()
	if len(reqs) != 1 || reqs[0].GetResponseNonce() != "2" || reqs[0].GetVersionInfo() != "" {
		t.Fatalf("requests %v: want the ACK of nonce 2 asked with no version", reqs)
	}
}
