package relay_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// What a Delta server thinks the relay holds, across subscriptions that end
// and come back: the relay never trusts what it cannot make the server
// confirm (see upstream.Client.Forget).

// A wildcard answer in flight when the wildcard's linger expires (the type
// still subscribed by name): go-control-plane sent it before it read the
// unsubscription, so it counts what it carried as held, and forgets it once
// it answers c1. The relay applies it (the type is subscribed): what it
// carries that nothing subscribes any more is unsure and forgotten, or c2
// and the new name, deleted meanwhile, stay in the wildcard set for good.
// The new name is the default servers' own (c3) or another authority's
// that they list, which only their wildcard covers too (the oracle's seed
// 190215: a wildcard client kept such a glob member for good).
func TestInFlightWildcardAnswerAfterItsExpiry(t *testing.T) {
	for _, late := range []string{"c3", globAuth + "g/m1"} {
		t.Run(late, func(t *testing.T) { inFlightWildcardAnswerAfterItsExpiry(t, late) })
	}
}

func inFlightWildcardAnswerAfterItsExpiry(t *testing.T, late string) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))
	auth := xdstest.StartUpstream(t)
	p := startGateProxy(t, up.Addr())
	r := xdstest.StartRelay(t, p.addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
		c.Upstream.Authorities = map[string]config.Authority{"auth": {
			XDSServers: []config.Server{{ServerURI: auth.Addr(), Protocol: "delta"}}}}
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	keeper.Ack(keeper.MustRecv())
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"*"}, nil)
	receiveAll(t, first, 2)

	// The upstream answers the wildcard (c2 changed, late new); the answer
	// is held on the wire.
	p.pause(true)
	n := len(up.Responses())
	up.SetResources(xdstest.Resources{resource.ClusterType: {
		xdstest.EDSCluster("c1", "eds-c1"), xdstest.EDSCluster("c2", "eds-c2-next"), xdstest.EDSCluster(late, "eds-late")}})
	up.MustWait(t, "the wildcard answer", func(s xdstest.Stats) bool { return len(s.Responses) > n })
	nreq := len(up.Requests())
	first.Close() // the wildcard's linger expires at once
	up.WaitRequest(t, nreq, "the wildcard's unsubscription", func(r xdstest.Request) bool {
		return r.Delta != nil && slices.Contains(r.Delta.GetResourceNamesUnsubscribe(), "*")
	})
	nreq = len(up.Requests())
	p.pause(false)
	up.WaitRequest(t, nreq, "the ACK of the held answer", func(r xdstest.Request) bool {
		return r.Delta != nil && r.Delta.GetResponseNonce() != ""
	})

	// c1 changes (the keeper is answered: the server forgets the rest);
	// c2 and late go, c4 comes: the server's answer to the wildcard
	// subscribed again brings c4, which proves it answered the whole set.
	up.SetResources(xdstest.Resources{resource.ClusterType: {
		xdstest.EDSCluster("c1", "eds-c1-next"), xdstest.EDSCluster("c4", "eds-c4")}})
	keeper.Ack(keeper.MustRecv())

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	convergeTo(t, wild, "c1", "c4")
}

// The wildcard's linger expires and comes back while nothing changes
// upstream. A server that keeps what it sent and ignores the unsubscription
// of a name the client never subscribed (xDS allows it) would not send c2
// again by itself: the relay, which keeps c2 unsure meanwhile, subscribes it
// with "*" and then unsubscribes it, which the server must answer with c2 or
// its removal; else it would take c2 for deleted after does_not_exist_after
// and tell the wildcard client c2 is gone while the upstream has it (found by
// a review).
func TestWildcardBackFromAKeepingServer(t *testing.T) {
	k := &keepingDelta{res: map[string]string{"c1": "e1", "c2": "e2"}}
	r := xdstest.StartRelay(t, serveADS(t, k), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	keeper.Ack(keeper.MustRecv())
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"*"}, nil)
	receiveAll(t, first, 2)
	first.Close()
	waitUpstream(t, r, resource.ClusterType, false, "c1")
	time.Sleep(100 * time.Millisecond)

	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	held := map[string]bool{}
	deadline := time.Now().Add(time.Second)
	for {
		resp, ok := wild.TryRecv(time.Until(deadline))
		if !ok {
			break
		}
		got, removed := deltaNames(resp)
		if len(removed) > 0 {
			t.Fatalf("the wildcard client was told %v are gone; the upstream has c1 and c2", removed)
		}
		for _, n := range got {
			held[n] = true
		}
		wild.Ack(resp)
	}
	if !held["c1"] || !held["c2"] {
		t.Fatalf("the wildcard client holds %v; the upstream has c1 and c2", held)
	}
}

// A warm-restart file's clusters, confirmed when the wildcard is subscribed
// (the first request told the server the relay holds them), while a wait
// for them armed before (armUnknown) still runs; then a TP2 subscription
// of c1 with parameters ends, which makes c1's plain selection unsure
// again. The old wait must not take it for deleted — the upstream answered
// it already — and the server, which keeps what it sent, is asked to
// confirm c1 again (subscribed with the wildcard, then unsubscribed). A
// deaf one, which ignores the question (it breaks xDS), leaves c1 unsure
// meanwhile, not gone. Found by the oracle, seed 1401575: a wildcard client
// was told c1 was gone.
func TestTP2KeyEndsAfterWarmRestartUnderTheWildcard(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		t.Run(fmt.Sprintf("deaf=%v", deaf), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache")
			k := &keepingDelta{res: map[string]string{"c1": "e1", "c2": "e2"}, deaf: deaf}
			opt := xdstest.WithConfig(func(c *config.Config) {
				c.Cache.PersistPath = path
				c.Upstream.XDSServers[0].Protocol = "delta"
				c.Upstream.Linger = 0
				c.Upstream.DoesNotExistAfter = time.Second
			})
			addr := serveADS(t, k)
			first := xdstest.StartRelay(t, addr, opt)
			c := xdstest.DialDelta(t, first.Addr(), &core.Node{Id: "n"})
			c.Subscribe(resource.ClusterType, []string{"*"}, nil)
			receiveAll(t, c, 2)
			c.Close()
			if err := first.Close(); err != nil { // writes the file
				t.Fatal(err)
			}
			k.mu.Lock()
			k.res["c2"] = "e2-next" // the server has something to send after the restart
			k.mu.Unlock()

			second := xdstest.StartRelay(t, addr, opt)
			wild := xdstest.DialDelta(t, second.Addr(), &core.Node{Id: "wild"})
			wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
			receiveAll(t, wild, 2)
			tp2 := xdstest.DialADS(t, second.Addr(), &core.Node{Id: "tp2"})
			tp2.SubscribeLocators(resource.ClusterType, nil, xdstest.Locator("c1", "env", "prod"))
			tp2.Ack(tp2.RecvType(resource.ClusterType))
			from := len(k.requests())
			tp2.Close()
			waitUpstream(t, second, resource.ClusterType, true) // the key's linger ended

			refuseRemovals(t, wild, time.Now().Add(1500*time.Millisecond)) // past the old wait
			subscribed, unsubscribed := false, false
			for _, req := range k.requests()[from:] {
				subscribed = subscribed || slices.Contains(req.GetResourceNamesSubscribe(), "c1")
				unsubscribed = unsubscribed || (subscribed && slices.Contains(req.GetResourceNamesUnsubscribe(), "c1"))
			}
			if !unsubscribed {
				t.Errorf("c1 was not subscribed and unsubscribed again (to be confirmed) after its key ended; requests: %v", k.requests()[from:])
			}
		})
	}
}

// A name subscribed, dropped before the server's answer arrived, and
// subscribed again: the second subscription gets the whole
// does_not_exist_after. The wait of the first one, still running, took the
// name for deleted before the server could answer the second (found by a
// review).
func TestSubscribedAgainWaitsAgain(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c0", "c1"))
	p := startGateProxy(t, up.Addr())
	r := xdstest.StartRelay(t, p.addr, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = time.Second
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c0"}, nil)
	keeper.Ack(keeper.MustRecv()) // connected, answered

	p.pause(true) // the server's answers are held on the wire
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	t0 := time.Now()
	first.Subscribe(resource.ClusterType, []string{"c1"}, nil) // c1's wait ends at t0+1s
	waitUpstream(t, r, resource.ClusterType, false, "c0", "c1")
	first.Close()
	waitUpstream(t, r, resource.ClusterType, false, "c0")
	time.Sleep(time.Until(t0.Add(700 * time.Millisecond)))
	again := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "again"})
	again.Subscribe(resource.ClusterType, []string{"c1"}, nil) // its wait ends at t0+1.7s
	time.Sleep(time.Until(t0.Add(1300 * time.Millisecond)))
	p.pause(false) // the server's answers arrive

	deadline := time.Now().Add(time.Second)
	for held := false; ; {
		resp, ok := again.TryRecv(time.Until(deadline))
		if !ok {
			if !held {
				t.Fatal("c1 never reached the client")
			}
			return
		}
		got, removed := deltaNames(resp)
		if len(removed) > 0 {
			t.Fatalf("the client was told %v do not exist %v after the first subscription; the upstream has c1", removed, time.Since(t0).Round(time.Millisecond))
		}
		held = held || slices.Contains(got, "c1")
		again.Ack(resp)
	}
}

// An unsure cached name that a client keeps subscribed by name, deleted
// upstream: its wait ends does_not_exist_after after the subscription,
// however often wildcard clients come and go meanwhile (found by a review:
// each first wildcard client restarted it, and the client was never told).
func TestWildcardChurnDoesNotPutOffANamedWait(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c0", "c1"))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers[0].Protocol = "delta"
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = time.Second
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c0"}, nil)
	keeper.Ack(keeper.MustRecv())
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	first.Ack(first.MustRecv())
	first.Close()
	waitUpstream(t, r, resource.ClusterType, false, "c0") // c1 cached, unsure
	up.SetResources(clusters("c0"))                       // and deleted upstream

	named := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "named"})
	t0 := time.Now()
	named.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	for time.Since(t0) < 3*time.Second {
		// A wildcard client comes and goes (its linger ends at once).
		w := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
		w.Subscribe(resource.ClusterType, []string{"*"}, nil)
		time.Sleep(50 * time.Millisecond)
		w.Close()
		until := time.Now().Add(300 * time.Millisecond)
		for {
			resp, ok := named.TryRecv(time.Until(until))
			if !ok {
				break
			}
			named.Ack(resp)
			if _, removed := deltaNames(resp); slices.Contains(removed, "c1") {
				return
			}
		}
	}
	t.Fatalf("c1, deleted upstream, not reported gone %v after its subscription (does_not_exist_after 1s)", time.Since(t0).Round(time.Millisecond))
}

// gateProxy forwards Delta ADS streams to target; server→relay messages
// wait while the gate is closed (in order).
type gateProxy struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	held   int // server→relay messages that waited at the gate
	addr   string
}

func startGateProxy(t *testing.T, target string) *gateProxy {
	p := &gateProxy{target: target}
	p.cond = sync.NewCond(&p.mu)
	p.addr = serveADS(t, p)
	return p
}

// serveADS serves srv on 127.0.0.1:0 until the test ends and returns its
// address.
func serveADS(t *testing.T, srv discoverygrpc.AggregatedDiscoveryServiceServer) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// refuseRemovals reads c's responses until the deadline, ACKing them, and
// fails on any removal: the upstream has everything c holds.
func refuseRemovals(t *testing.T, c *xdstest.DeltaClient, deadline time.Time) {
	t.Helper()
	for {
		resp, ok := c.TryRecv(time.Until(deadline))
		if !ok {
			return
		}
		if _, removed := deltaNames(resp); len(removed) > 0 {
			t.Fatalf("told %v are gone, but the upstream has them", removed)
		}
		c.Ack(resp)
	}
}

// waitHeld waits until n server→relay messages have waited at the gate.
func (p *gateProxy) waitHeld(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.held < n {
		p.cond.Wait()
	}
}

func (p *gateProxy) pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *gateProxy) DeltaAggregatedResources(down discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	conn, err := grpc.NewClient(p.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	up, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() {
		for {
			req, err := down.Recv()
			if err != nil {
				errc <- err
				return
			}
			if err := up.Send(req); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		for {
			resp, err := up.Recv()
			if err != nil {
				errc <- err
				return
			}
			p.mu.Lock()
			if p.paused {
				p.held++
				p.cond.Broadcast()
			}
			for p.paused {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if err := down.Send(resp); err != nil {
				errc <- err
				return
			}
		}
	}()
	return <-errc
}

func (p *gateProxy) StreamAggregatedResources(discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	select {} // unused
}

// keepingDelta is a minimal Delta ADS server for CDS that follows the xDS
// text literally: it remembers what it sent (held) until the client
// unsubscribes a name it subscribed to, and "can simply ignore" phantom
// unsubscriptions (names the client was not subscribed to, e.g. ones only
// the wildcard covered). A deaf one ignores every unsubscription of a name.
type keepingDelta struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	mu   sync.Mutex
	res  map[string]string // name → eds service name
	deaf bool
	reqs []*discoverygrpc.DeltaDiscoveryRequest
}

// requests returns the CDS requests k received.
func (k *keepingDelta) requests() []*discoverygrpc.DeltaDiscoveryRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.reqs)
}

func (k *keepingDelta) DeltaAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	wild := false
	named := map[string]bool{}
	held := map[string]string{}
	nonce := 0
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		if req.GetTypeUrl() != resource.ClusterType {
			continue
		}
		k.mu.Lock()
		k.reqs = append(k.reqs, req)
		k.mu.Unlock()
		for n, v := range req.GetInitialResourceVersions() {
			held[n] = v
		}
		for _, n := range req.GetResourceNamesSubscribe() {
			if n == "*" {
				wild = true
			} else {
				named[n] = true
			}
		}
		for _, n := range req.GetResourceNamesUnsubscribe() {
			switch {
			case n == "*":
				wild = false
			case named[n] && k.deaf:
				delete(named, n) // but it keeps what it sent
			case named[n]:
				delete(named, n)
				delete(held, n)
			default: // phantom unsubscription: ignored
			}
		}
		k.mu.Lock()
		resp := &discoverygrpc.DeltaDiscoveryResponse{TypeUrl: resource.ClusterType, SystemVersionInfo: "v"}
		for n, eds := range k.res {
			if !wild && !named[n] {
				continue
			}
			if held[n] == eds {
				continue
			}
			held[n] = eds
			resp.Resources = append(resp.Resources, &discoverygrpc.Resource{Name: n, Version: eds, Resource: mustAnyT(xdstest.EDSCluster(n, eds))})
		}
		k.mu.Unlock()
		if len(resp.Resources) == 0 {
			continue
		}
		nonce++
		resp.Nonce = fmt.Sprint(nonce)
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

func mustAnyT(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// The wildcard's linger expires while the stream to the primary is SotW;
// the relay then fails over to a Delta server, whose first request names c1
// only: that server knows nothing of what else the relay holds, so c2,
// deleted meanwhile, must not stay in the wildcard set (found by a review:
// the members were left sure, as a SotW server answers "*" with the whole
// set).
func TestWildcardMembersAfterSotWToDeltaFailover(t *testing.T) {
	up0 := xdstest.StartUpstream(t)
	up1 := xdstest.StartUpstream(t)
	up0.SetResources(clusters("c1", "c2"))
	up1.SetResources(clusters("c1", "c2"))
	r := xdstest.StartRelay(t, up0.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers = []config.Server{
			{ServerURI: up0.Addr(), Protocol: "sotw"},
			{ServerURI: up1.Addr(), Protocol: "delta"},
		}
		c.Upstream.Linger = 0
		c.Upstream.DoesNotExistAfter = 200 * time.Millisecond
	}))
	keeper := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "keeper"})
	keeper.Subscribe(resource.ClusterType, []string{"c1"}, nil)
	keeper.Ack(keeper.MustRecv())
	first := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "first"})
	first.Subscribe(resource.ClusterType, []string{"*"}, nil)
	receiveAll(t, first, 2)
	first.Close()
	waitUpstream(t, r, resource.ClusterType, false, "c1")
	up1.SetResources(clusters("c1")) // c2 goes
	up0.Stop()
	xdstest.Eventually(t, func() bool {
		for _, u := range r.DebugUpstreams() {
			if u.Server == up1.Addr() && u.State == "connected" {
				return true
			}
		}
		return false
	}, "failover to the Delta server", func() any { return r.DebugUpstreams() })
	wild := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "wild"})
	wild.Subscribe(resource.ClusterType, []string{"*"}, nil)
	convergeTo(t, wild, "c1")
}
