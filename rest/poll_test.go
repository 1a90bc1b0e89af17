package rest_test

import (
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// An Envoy-style long poll of every cluster: answered at once with the full
// set when its version is empty, held while nothing changes, answered as
// soon as the upstream changes, and 304 when the timeout passes first.
// Every answer is checked against what the upstream held at that moment.
func TestLongPollClusters(t *testing.T) {
	first := clusters("c1", "c2")
	rr := startREST(t, first, 2*time.Second)

	r := rr.post(t, "clusters", request("envoy-1", ""))
	wantClusters(t, r, first)
	v1 := r.resp.GetVersionInfo()

	// The same version is held until the upstream changes.
	ch := rr.postAsync(t, "clusters", request("envoy-1", v1))
	held(t, ch)
	second := clusters("c1", "c2", "c3")
	rr.up.SetResources(second)
	r = wait(t, ch)
	wantClusters(t, r, second)
	v2 := r.resp.GetVersionInfo()
	if v2 == v1 {
		t.Fatalf("the changed answer kept version %q", v1)
	}

	// Nothing changes: 304 after the poll timeout, no body.
	start := time.Now()
	r = rr.post(t, "clusters", request("envoy-1", v2))
	if r.code != http.StatusNotModified || r.body != "" {
		t.Fatalf("unchanged poll: %d %q, want 304", r.code, r.body)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("unchanged poll answered after %v, before the poll timeout", time.Since(start))
	}

	// A stale version (another replica's, a restart) is answered at once.
	wantClusters(t, rr.post(t, "clusters", request("envoy-2", "stale")), second)
}

// EDS over REST: named resources, each answer the requested ones only; a
// name the upstream does not have is not answered as gone (the poll waits).
func TestPollNamedEndpoints(t *testing.T) {
	res := xdstest.Resources{resource.EndpointType: {
		xdstest.Endpoints("e1", "127.0.0.1:1"), xdstest.Endpoints("e2", "127.0.0.1:2"),
	}}
	rr := startREST(t, res, quiet)

	r := rr.post(t, "endpoints", request("envoy-1", "", "e1"))
	if r.code != http.StatusOK || len(r.resp.GetResources()) != 1 {
		t.Fatalf("EDS poll: %d %q", r.code, r.body)
	}
	got := &endpoint.ClusterLoadAssignment{}
	if err := r.resp.GetResources()[0].UnmarshalTo(got); err != nil || !proto.Equal(got, res[resource.EndpointType][0]) {
		t.Fatalf("EDS answer %v (%v), want %v", got, err, res[resource.EndpointType][0])
	}
	if r.resp.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("type %q", r.resp.GetTypeUrl())
	}

	// Nothing is known of e9: no answer that would make it look absent.
	r = rr.post(t, "endpoints", request("envoy-1", "", "e9"))
	if r.code != http.StatusNotModified {
		t.Fatalf("poll of an unknown name: %d %q, want 304", r.code, r.body)
	}
}

// xDS: a NACKed version is not sent again to that node; the next change is.
func TestPollNACKNotResent(t *testing.T) {
	first := clusters("c1")
	rr := startREST(t, first, quiet)
	r := rr.post(t, "clusters", request("envoy-1", ""))
	wantClusters(t, r, first)

	nack := request("envoy-1", "")
	nack.ErrorDetail = &statuspb.Status{Code: 3, Message: "bad cluster"}
	if r := rr.post(t, "clusters", nack); r.code != http.StatusNotModified {
		t.Fatalf("poll after a NACK: %d %q, want 304 (the rejected version is not resent)", r.code, r.body)
	}
	// Another node gets it.
	wantClusters(t, rr.post(t, "clusters", request("envoy-2", "")), first)

	second := clusters("c1", "c2")
	ch := rr.postAsync(t, "clusters", nack)
	rr.up.SetResources(second)
	wantClusters(t, wait(t, ch), second)
	if got := rr.metric(t, `xds_relay_nacks_total{protocol="rest",type_url="`+resource.ClusterType+`"}`); got != 2 {
		t.Errorf("REST NACKs counted %v, want 2", got)
	}
}

// A poll is listed in /debug/clients and counted in the metrics while it is
// held, and no longer once answered.
func TestPollVisibleWhileHeld(t *testing.T) {
	first := clusters("c1")
	rr := startREST(t, first, 5*time.Second)
	v := rr.post(t, "clusters", request("envoy-1", "")).resp.GetVersionInfo()

	ch := rr.postAsync(t, "clusters", request("envoy-1", v))
	gauge := `xds_relay_downstream_streams{protocol="rest",type_url="` + resource.ClusterType + `"}`
	xdstest.Eventually(t, func() bool { return rr.metric(t, gauge) == 1 }, "the held poll counted", nil)
	clients := rr.DebugClients("envoy-1")
	if len(clients) != 1 || clients[0].Protocol != "rest" || clients[0].Service != resource.ClusterType ||
		!clients[0].Types[resource.ClusterType].Wildcard || clients[0].Types[resource.ClusterType].AckedVersion != v {
		t.Fatalf("/debug/clients = %+v, want the held REST poll", clients)
	}
	rr.up.SetResources(clusters("c1", "c2"))
	if r := wait(t, ch); r.code != http.StatusOK {
		t.Fatalf("answer %d", r.code)
	}
	xdstest.Eventually(t, func() bool { return rr.metric(t, gauge) == 0 && len(rr.DebugClients("")) == 0 },
		"the answered poll forgotten", func() any { return rr.DebugClients("") })
	if got := rr.metric(t, `xds_relay_responses_total{protocol="rest",type_url="`+resource.ClusterType+`"}`); got != 2 {
		t.Errorf("REST responses counted %v, want 2", got)
	}
	if got := rr.metric(t, `xds_relay_acks_total{protocol="rest",type_url="`+resource.ClusterType+`"}`); got != 1 {
		t.Errorf("REST ACKs counted %v, want 1 (the poll with the first answer's version)", got)
	}
}

// Closing the relay ends held polls at once (503), not after the timeout.
func TestPollEndsOnClose(t *testing.T) {
	rr := startREST(t, clusters("c1"), time.Minute)
	v := rr.post(t, "clusters", request("envoy-1", "")).resp.GetVersionInfo()
	ch := rr.postAsync(t, "clusters", request("envoy-1", v))
	held(t, ch)
	go rr.Relay.Relay.Close()
	r := wait(t, ch)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "shutting down") {
		t.Fatalf("held poll at close: %d %q, want 503", r.code, r.body)
	}
}

// metric reads one sample of the relay's registry (see xdstest.Metric).
func (rr *restRelay) metric(t *testing.T, sample string) float64 {
	t.Helper()
	return xdstest.Metric(t, rr.Registry(), sample)
}

// A CDS poll is State of the World: an answer without a cluster deletes it
// at the client. A poll naming a cluster the cache does not know of yet is
// held — not answered with the others only — until the upstream sends it.
func TestPollHeldUntilEveryNameIsKnown(t *testing.T) {
	rr := startREST(t, clusters("c1"), 5*time.Second)
	ch := rr.postAsync(t, "clusters", request("envoy-1", "from-another-replica", "c1", "c2"))
	held(t, ch)
	both := clusters("c1", "c2")
	rr.up.SetResources(both)
	wantClusters(t, wait(t, ch), both)
}

// The drain of a shutdown (StopServing) moves REST pollers too: a held poll
// is answered 503 at once, the REST listener closes (ServeREST returns nil,
// checked at cleanup), and the relay, not closed, refuses new polls.
func TestPollEndsOnDrain(t *testing.T) {
	rr := startREST(t, clusters("c1"), time.Minute)
	v := rr.post(t, "clusters", request("envoy-1", "")).resp.GetVersionInfo()
	ch := rr.postAsync(t, "clusters", request("envoy-1", v))
	held(t, ch)
	rr.Relay.Relay.StopServing()
	r := wait(t, ch)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "shutting down") {
		t.Fatalf("held poll at drain: %d %q, want 503", r.code, r.body)
	}
	xdstest.Eventually(t, func() bool {
		res, err := http.Post(rr.url+"/v3/discovery:clusters", "application/json", strings.NewReader(`{}`))
		if err == nil {
			res.Body.Close()
		}
		return err != nil // connection refused: the listener is closed
	}, "the REST listener closed by the drain", nil)
}

// A shutdown's drain that comes before ServeREST has begun closes the REST
// listener all the same: it used to be left open, unserved, and clients'
// connections hung in its backlog.
func TestDrainBeforeServeREST(t *testing.T) {
	up := xdstest.StartUpstream(t)
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.REST = &config.REST{Listen: "127.0.0.1:0", PollTimeout: time.Second}
	}))
	r.Relay.StopServing()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ServeREST(lis); err != nil {
		t.Fatalf("ServeREST after the drain: %v", err)
	}
	if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the REST listener is still open after the drain")
	}
}

// A poll that comes with a version (config from elsewhere) and a glob
// collection whose authority is down or slow is held, as a SotW stream would
// be: the client may hold members the relay does not know of. It is answered
// with the whole set once the authority answers the glob. A poll without a
// version holds nothing to lose and is answered at once.
func TestPollGlobHeldUntilItsSetIsAnswered(t *testing.T) {
	const auth = "xdstp://auth/envoy.config.cluster.v3.Cluster/"
	glob, m1, m2 := auth+"g/*", auth+"g/m1", auth+"g/m2"
	for _, outage := range []string{"down", "slow"} {
		t.Run(outage, func(t *testing.T) {
			g := xdstest.NewGlobADS(m1, m2)
			up := xdstest.StartUpstream(t, xdstest.WithADS(g))
			end := func() { g.Pause(false) }
			if outage == "down" {
				up.Stop()
				end = up.Restart
			} else {
				g.Pause(true)
			}
			rr := startREST(t, clusters("c0"), 5*time.Second, xdstest.WithConfig(func(c *config.Config) {
				c.Upstream.Authorities = map[string]config.Authority{"auth": {
					XDSServers: []config.Server{{ServerURI: up.Addr(), Protocol: "delta"}}}}
			}))
			wantClusters(t, rr.post(t, "clusters", request("fresh", "", "c0", glob)), clusters("c0"))
			ch := rr.postAsync(t, "clusters", request("moved", "v-elsewhere", "c0", glob))
			held(t, ch)

			end()
			wantClusters(t, wait(t, ch), clusters("c0", m1, m2))
		})
	}
}

// Once the glob's authority has gone away, the set it answered is
// unconfirmed (View.Stale): a poll with a version waits for the authority
// again, as a SotW stream does.
func TestPollGlobHeldWhileItsSetIsUnconfirmed(t *testing.T) {
	const auth = "xdstp://auth/envoy.config.cluster.v3.Cluster/"
	glob, m1, m2, m3 := auth+"g/*", auth+"g/m1", auth+"g/m2", auth+"g/m3"
	g := xdstest.NewGlobADS(m1, m2)
	up := xdstest.StartUpstream(t, xdstest.WithADS(g))
	rr := startREST(t, clusters("c0"), 5*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: up.Addr(), Protocol: "delta"}}}}
	}))
	xdstest.Eventually(t, func() bool {
		r := rr.post(t, "clusters", request("first", "", "c0", glob))
		return r.resp != nil && len(r.resp.GetResources()) == 3
	}, "the glob's set", nil)
	up.Stop()
	xdstest.Eventually(t, func() bool {
		return xdstest.Metric(t, rr.Registry(), `xds_relay_upstream_reconnects_total{authority="auth",server="`+up.Addr()+`"}`) > 0
	}, "the authority's stream gone", nil)

	ch := rr.postAsync(t, "clusters", request("moved", "v-elsewhere", "c0", glob))
	held(t, ch)
	g.Set(m1, m2, m3)
	up.Restart()
	wantClusters(t, wait(t, ch), clusters("c0", m1, m2, m3))
}

// A poll of an xdstp name in Envoy's spelling (':' percent-encoded) is
// subscribed upstream as spelled: control planes match names exactly
// (issue 23, item 12).
func TestPollEnvoySpelledName(t *testing.T) {
	const name = "xdstp://auth.example/envoy.config.endpoint.v3.ClusterLoadAssignment/svc%3A8080"
	res := xdstest.Resources{resource.EndpointType: {xdstest.Endpoints(name, "127.0.0.1:1")}}
	rr := startREST(t, res, 10*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}}
	}))
	r := rr.post(t, "endpoints", request("envoy-1", "", name))
	if r.code != http.StatusOK || len(r.resp.GetResources()) != 1 {
		t.Fatalf("EDS poll of %s: %d %q", name, r.code, r.body)
	}
}

// The relay's does-not-exist timer is not the upstream's word (issue 23,
// item 4). Past upstream.does_not_exist_after, a poll that holds nothing
// (no version) is answered without a cluster the upstream says nothing of —
// not found yet — and the relay asks the upstream on a new stream, whose
// word (here: it does not exist) answers a poll that holds config (it polls
// with a version, from this relay or another). The upstream's silence on
// that new stream too is relay's TestDoesNotExistTimerRemovesNothingHeld.
func TestPollNotFoundYetOnlyWithoutAVersion(t *testing.T) {
	rr := startREST(t, clusters("c1"), 5*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	wantClusters(t, rr.post(t, "clusters", request("grpc", "", "c1", "c9")), clusters("c1"))
	ch := rr.postAsync(t, "clusters", request("envoy-1", "from-another-replica", "c1", "c9"))
	wantClusters(t, wait(t, ch), clusters("c1"))
}

// While the relay drains (POST /drain) new polls are answered 503, so that
// pollers go to another replica; once the drain ends (DELETE /drain) they
// are served again. The REST listener stays open throughout.
func TestPollRefusedWhileDrained(t *testing.T) {
	res := clusters("c1")
	rr := startREST(t, res, time.Minute)
	rr.Relay.Relay.StartDrain()
	if r := rr.post(t, "clusters", request("envoy-1", "")); r.code != http.StatusServiceUnavailable {
		t.Errorf("poll while drained: %d %q, want 503", r.code, r.body)
	}
	rr.Relay.Relay.EndDrain()
	wantClusters(t, rr.post(t, "clusters", request("envoy-1", "")), res)
}

// No rollback (issue 23; the oracle's seed 81638): a poll with a version
// holds config from elsewhere perhaps, so it is not answered with a copy the
// upstream has not confirmed since its subscription ended — the upstream
// changed it meanwhile — but with the upstream's own once it answers the
// new subscription.
func TestPollNoRollbackFromUnsureCopy(t *testing.T) {
	rr := startREST(t, xdstest.Resources{resource.EndpointType: {xdstest.Endpoints("e1", "127.0.0.1:1")}}, 5*time.Second,
		xdstest.WithConfig(func(c *config.Config) {
			c.Upstream.XDSServers[0].Protocol = "delta"
			c.Upstream.Linger = 0
		}))
	if r := rr.post(t, "endpoints", request("first", "", "e1")); r.code != http.StatusOK {
		t.Fatalf("first poll: %d %q", r.code, r.body)
	}
	rr.up.WaitRequest(t, 0, "e1 unsubscribed upstream", func(req xdstest.Request) bool {
		return slices.Contains(req.Delta.GetResourceNamesUnsubscribe(), "e1")
	})
	rr.up.SetResources(xdstest.Resources{resource.EndpointType: {xdstest.Endpoints("e1", "127.0.0.1:2")}}) // the relay is not told

	r := rr.post(t, "endpoints", request("moved", "v-elsewhere", "e1"))
	if r.code != http.StatusOK || len(r.resp.GetResources()) != 1 {
		t.Fatalf("poll from elsewhere: %d %q", r.code, r.body)
	}
	got := &endpoint.ClusterLoadAssignment{}
	if err := r.resp.GetResources()[0].UnmarshalTo(got); err != nil {
		t.Fatal(err)
	}
	if port := got.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); port != 2 {
		t.Fatalf("answered e1 with port %d, want the upstream's 2 (1: the relay's copy from before the subscription ended, a rollback)", port)
	}
}

// A poll's TP3 errors name the resources as the poller spelled them (the
// oracle's seed 173339): under the relay's canonical key the client matches
// nothing, and a CDS answer without its cluster deletes it.
func TestPollEnvoySpelledNameErrorAsSpelled(t *testing.T) {
	const name = "xdstp://unknown.example/envoy.config.cluster.v3.Cluster/svc%3A8080"
	rr := startREST(t, clusters("c1"), 10*time.Second)
	r := rr.post(t, "clusters", request("envoy-1", "", "c1", name))
	if r.code != http.StatusOK {
		t.Fatalf("CDS poll: %d %q", r.code, r.body)
	}
	errs := r.resp.GetResourceErrors()
	if len(errs) != 1 || errs[0].GetResourceName().GetName() != name {
		t.Fatalf("resource_errors = %v, want one for %s as spelled", errs, name)
	}
}

// A NACK from a node the relay remembers nothing of (it restarted, or the
// poller comes from another replica) does not say which version was
// rejected: it is answered with the current one (the oracle's seed 200286:
// a poller that NACKed before a restart was held for good while the world
// had changed since). Should that be the rejected one, the next NACK is
// remembered: one round more, not a loop.
func TestPollNACKWithNothingRemembered(t *testing.T) {
	res := clusters("c1", "c2")
	rr := startREST(t, res, quiet)
	nack := request("envoy-1", "v-before-the-restart")
	nack.ErrorDetail = &statuspb.Status{Code: 3, Message: "bad cluster"}
	wantClusters(t, rr.post(t, "clusters", nack), res)
	if r := rr.post(t, "clusters", nack); r.code != http.StatusNotModified {
		t.Fatalf("a second NACK: %d %q, want 304 (the version it rejected is remembered now)", r.code, r.body)
	}
}

// A glob member the default servers' wildcard lists is theirs to speak of
// once its glob's subscription ends (the oracle's seed 210205): a wildcard
// poll with a version, which is not sent a copy that may be older than its
// own, is answered. The member was left unsure, and nothing would ever
// confirm it — the default servers think the relay holds it — so the poll
// was held for good.
func TestPollWildcardAnsweredOnceAListedGlobEnds(t *testing.T) {
	const auth = "xdstp://auth/envoy.config.cluster.v3.Cluster/"
	glob, m1 := auth+"g/*", auth+"g/m1"
	up := xdstest.StartUpstream(t, xdstest.WithADS(xdstest.NewGlobADS(m1)))
	rr := startREST(t, clusters("c0", m1), 5*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: up.Addr(), Protocol: "delta"}}}}
	}))
	g := xdstest.DialADS(t, rr.Addr(), &core.Node{Id: "glob"})
	g.Subscribe(resource.ClusterType, glob)
	g.Ack(g.RecvType(resource.ClusterType))
	w := xdstest.DialADS(t, rr.Addr(), &core.Node{Id: "wild"})
	w.Subscribe(resource.ClusterType, "*")
	for resp := w.RecvType(resource.ClusterType); len(resp.GetResources()) < 2; resp = w.RecvType(resource.ClusterType) {
		w.Ack(resp) // until the default servers list m1
	}
	g.Close()
	xdstest.Eventually(t, func() bool {
		return xdstest.Metric(t, rr.Registry(), `xds_relay_upstream_requests_total{authority="auth",op="unsubscribe"}`) > 0
	}, "the glob unsubscribed", nil)

	wantClusters(t, rr.post(t, "clusters", request("moved", "v-elsewhere")), clusters("c0", m1))
}

// A name of another authority the default servers' wildcard lists is theirs
// to speak of once its own subscription by name ends, as a listed glob
// member is: a wildcard poll with a version is answered. Left unsure, the
// name was never confirmed again — the default servers think the relay
// holds it — and the poll was held for good.
func TestPollWildcardAnsweredOnceAListedNameEnds(t *testing.T) {
	const n = "xdstp://auth/envoy.config.cluster.v3.Cluster/svc16"
	auth := xdstest.StartUpstream(t)
	auth.SetResources(clusters(n))
	rr := startREST(t, clusters("c0", n), 5*time.Second, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Linger = 0
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	named := xdstest.DialADS(t, rr.Addr(), &core.Node{Id: "named"})
	named.Subscribe(resource.ClusterType, n)
	named.Ack(named.RecvType(resource.ClusterType))
	w := xdstest.DialADS(t, rr.Addr(), &core.Node{Id: "wild"})
	w.Subscribe(resource.ClusterType, "*")
	for resp := w.RecvType(resource.ClusterType); len(resp.GetResources()) < 2; resp = w.RecvType(resource.ClusterType) {
		w.Ack(resp) // until the default servers list n
	}
	named.Close()
	auth.WaitRequest(t, 0, "n unsubscribed", func(req xdstest.Request) bool {
		return slices.Contains(req.Delta.GetResourceNamesUnsubscribe(), n)
	})

	wantClusters(t, rr.post(t, "clusters", request("moved", "v-elsewhere")), clusters("c0", n))
}
