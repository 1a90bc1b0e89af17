package integration_test

// Chaos tests: the relay under failures of its upstreams, of itself, of its
// clients and of their inputs. Every test ends by checking content: each
// client holds exactly the upstream's final state (resource bytes, by
// hash) — nothing lost, nothing stale. The helpers are in fleet_test.go;
// -soak or XDS_SOAK=1 runs longer variants (soak_test.go).

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// churnFleet starts n churn clients against addr: even ones SotW (every
// fourth with a legacy wildcard), odd ones Delta, each on its own
// connection.
func churnFleet(t *testing.T, addr string, n int) fleet {
	t.Helper()
	f := make(fleet, n)
	for i := range f {
		f[i] = newClient(t, addr, fmt.Sprintf("client-%d", i),
			clientOpts{delta: i%2 == 1, legacyWildcard: i%4 == 0}, churnSubs(i)...)
	}
	return f
}

// waitUpstreamServer waits (xdstest.WaitTimeout) until the relay's default
// upstream is connected to addr.
func waitUpstreamServer(t *testing.T, r *relay.Relay, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last relay.UpstreamInfo
	for {
		for _, u := range r.DebugUpstreams() {
			if u.Authority == "" {
				last = u
			}
		}
		if last.Server == addr && last.State == "connected" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("relay upstream: server %q state %q (last error %q), want connected to %s",
				last.Server, last.State, last.LastError, addr)
		case <-tick.C: // DebugUpstreams has no change notification; poll it
		}
	}
}

// 1. The upstream is killed and restarted again and again while its content
// changes; the relay reconnects each time and its clients, SotW and Delta,
// converge to the final state without ever losing their own streams.
func TestChaosUpstreamRestarts(t *testing.T) {
	t.Parallel()
	cycles := scaled(5, 100)
	up := xdstest.StartUpstream(t)
	g := 0
	up.SetResources(churn(g))
	r := xdstest.StartRelay(t, up.Addr())
	f := churnFleet(t, r.Addr(), scaled(50, 200))
	f.waitConverged(t, stateOf(t, churn(g)), "before the chaos")

	for cycle := range cycles {
		for range 1 + cycle%3 { // churn while connected
			g++
			up.SetResources(churn(g))
		}
		up.Stop()
		for range 1 + (cycle+1)%3 { // churn while the relay cannot see it
			g++
			up.SetResources(churn(g))
		}
		up.Restart()
		if cycle%2 == 0 {
			// Every other cycle, let the relay reconnect and be served before
			// the next kill (which resets its reconnect backoff); the others
			// kill it while it may still be connecting.
			waitServed(t, up)
		}
		g++
		up.SetResources(churn(g))
	}
	f.waitConverged(t, stateOf(t, churn(g)), fmt.Sprintf("after %d upstream restarts", cycles))

	if n := up.TotalStreams(); n < cycles/2+1 {
		t.Errorf("upstream saw %d streams over %d restarts; the relay did not reconnect", n, cycles)
	}
	if total, most := f.streamsOpened(); most != 1 {
		t.Errorf("clients opened %d streams (one client %d): upstream failures broke downstream streams", total, most)
	}
}

// waitServed waits (xdstest.WaitTimeout) until the relay has ACKed a
// response on the upstream's newest stream, which must be open.
func waitServed(t *testing.T, up *xdstest.Upstream) {
	t.Helper()
	up.MustWait(t, "an ACK on the newest stream", func(s xdstest.Stats) bool {
		if s.OpenStreams == 0 {
			return false
		}
		var newest int64
		for _, r := range s.Requests {
			newest = max(newest, r.StreamID)
		}
		for _, r := range s.Requests {
			if r.StreamID == newest && r.Nonce() != "" && !r.IsNACK() {
				return true
			}
		}
		return false
	})
}

// 2. With xds_servers [primary, secondary], the relay falls back to the
// secondary when the primary dies and returns to the primary when it is
// back (the relay probes every 10 s); clients keep converging throughout.
func TestChaosFallbackAndReturn(t *testing.T) {
	t.Parallel()
	primary := xdstest.StartUpstream(t)
	secondary := xdstest.StartUpstream(t)
	g := 0
	setBoth := func() {
		res := churn(g)
		primary.SetResources(res)
		secondary.SetResources(res)
	}
	setBoth()
	r := xdstest.StartRelay(t, primary.Addr(), xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.XDSServers = []config.Server{{ServerURI: primary.Addr()}, {ServerURI: secondary.Addr()}}
	}))
	f := churnFleet(t, r.Addr(), 20)
	f.waitConverged(t, stateOf(t, churn(g)), "on the primary")
	waitUpstreamServer(t, r.Relay, primary.Addr())
	if n := secondary.TotalStreams(); n != 0 {
		t.Fatalf("secondary saw %d streams while the primary was up", n)
	}

	primary.Stop()
	secondary.WaitStreams(t, 1)
	waitUpstreamServer(t, r.Relay, secondary.Addr())
	for range 5 {
		g++
		setBoth()
	}
	f.waitConverged(t, stateOf(t, churn(g)), "on the secondary")

	// The primary comes back. The relay checks earlier servers every 10 s
	// (upstream.DefaultPrimaryRetryInterval), so this wait is longer than the
	// usual 10 s; the content keeps changing meanwhile.
	primary.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+xdstest.WaitTimeout)
	defer cancel()
	back := make(chan error, 1)
	go func() {
		back <- primary.Wait(ctx, func(s xdstest.Stats) bool { return s.OpenStreams == 1 })
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err := <-back:
			if err != nil {
				t.Fatalf("the relay did not return to the primary: %v (upstreams: %+v)", err, r.DebugUpstreams())
			}
			waiting = false
		case <-tick.C: // pace the churn while the relay is on the secondary
			g++
			setBoth()
		}
	}
	secondary.WaitStreams(t, 0)
	waitUpstreamServer(t, r.Relay, primary.Addr())
	g++
	setBoth()
	f.waitConverged(t, stateOf(t, churn(g)), "back on the primary")

	if p, s := primary.TotalStreams(), secondary.TotalStreams(); p != 2 || s != 1 {
		t.Errorf("streams: primary %d, secondary %d; want 2 and 1", p, s)
	}
	if total, most := f.streamsOpened(); most != 1 {
		t.Errorf("clients opened %d streams (one client %d): a fallback broke downstream streams", total, most)
	}
}

// 3. The relay is closed and a new one starts on the same address, several
// times, while the upstream content changes; the clients redial (Delta ones
// with initial_resource_versions) and converge, deletions included.
func TestChaosRelayRestart(t *testing.T) {
	t.Parallel()
	t.Run("cold", func(t *testing.T) { relayRestarts(t) })
	// With cache.persist_path the restarted relay serves its last cache at
	// once; what changed upstream meanwhile must still replace it.
	t.Run("warm", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cache")
		relayRestarts(t, xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path }))
	})
}

func relayRestarts(t *testing.T, opts ...xdstest.RelayOption) {
	cycles := scaled(3, 30)
	up := xdstest.StartUpstream(t)
	g := 0
	up.SetResources(churn(g))
	p := startRelayProc(t, zap.NewNop(), up.Addr(), opts...)
	f := churnFleet(t, p.Addr(), scaled(40, 200))
	f.waitConverged(t, stateOf(t, churn(g)), "before the first restart")

	for cycle := range cycles {
		p.Stop()
		for range 4 { // clusters x.. are added and removed meanwhile
			g++
			up.SetResources(churn(g))
		}
		p.Start()
		f.waitConverged(t, stateOf(t, churn(g)), fmt.Sprintf("after relay restart %d", cycle+1))
		g++
		up.SetResources(churn(g))
		f.waitConverged(t, stateOf(t, churn(g)), fmt.Sprintf("an update after relay restart %d", cycle+1))
	}
	for _, c := range f {
		if s := c.Stats(); s.Streams < cycles+1 {
			t.Errorf("client %s opened %d streams over %d relay restarts", c.id, s.Streams, cycles)
		}
	}
}

// bigClusters is a CDS set of about 100 KB in few resources (cheap to
// compare and hash): 25 clusters with 4 KB EDS service names, plus "gen",
// whose EDS service name is gen-<g>.
func bigClusters(g int) xdstest.Resources {
	cs := make([]types.Resource, 0, 26)
	for i := range 25 {
		cs = append(cs, xdstest.EDSCluster(fmt.Sprintf("c%03d", i), strings.Repeat(string(rune('a'+i)), 4000)))
	}
	cs = append(cs, xdstest.EDSCluster("gen", fmt.Sprintf("gen-%d", g)))
	return xdstest.Resources{resource.ClusterType: cs}
}

// 4. A client that stops reading: the others get every update, each before
// the next one is made, and the relay's heap does not grow with the updates
// the stuck client misses (they are coalesced, not queued).
func TestChaosStuckClient(t *testing.T) {
	steps := scaled(150, 2000)
	up := xdstest.StartUpstream(t)
	up.SetResources(bigClusters(0))
	r := xdstest.StartRelay(t, up.Addr())

	conn := dialFast(t, r.Addr(), grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Send(&discoverygrpc.DiscoveryRequest{Node: &core.Node{Id: "stuck"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}

	f := fleet{}
	for i := range 4 {
		f = append(f, newClient(t, r.Addr(), fmt.Sprintf("fast-%d", i), clientOpts{delta: i%2 == 1},
			wildcardSub(resource.ClusterType)))
	}
	f.waitConverged(t, stateOf(t, bigClusters(0)), "initial")

	respSize := 0
	for _, c := range bigClusters(0)[resource.ClusterType] {
		respSize += proto.Size(c)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for g := 1; g <= steps; g++ {
		up.SetResources(bigClusters(g))
		f.waitConverged(t, stateOf(t, bigClusters(g)), fmt.Sprintf("update %d", g))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	// Queueing every missed update would cost steps × respSize; allow a
	// quarter of that (the stuck stream holds one response in flight and one
	// pending, plus noise).
	bound := int64(steps*respSize) / 4
	t.Logf("heap %d → %d bytes (%+d) over %d updates of %d bytes with a stuck client; bound %d",
		before.HeapAlloc, after.HeapAlloc, growth, steps, respSize, bound)
	if growth > bound {
		t.Errorf("heap grew by %d bytes over %d updates of %d bytes with a stuck client (bound %d): missed updates are queued",
			growth, steps, respSize, bound)
	}

	// The stuck client reads again: it gets the latest state at last, within
	// xdstest.WaitTimeout.
	stop := time.AfterFunc(xdstest.WaitTimeout, cancel)
	defer stop.Stop()
	want := fmt.Sprintf("gen-%d", steps)
	for got := 0; ; got++ {
		resp, err := stuck.Recv()
		if err != nil {
			t.Fatalf("stuck client, after %d responses: %v", got, err)
		}
		if err := stuck.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if heldGen(t, resp) == want {
			break
		}
	}
}

// heldGen is the EDS service name of cluster "gen" in a CDS response.
func heldGen(t *testing.T, resp *discoverygrpc.DiscoveryResponse) string {
	t.Helper()
	for _, a := range resp.GetResources() {
		c := &cluster.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if c.GetName() == "gen" {
			return c.GetEdsClusterConfig().GetServiceName()
		}
	}
	return ""
}

// 5. Two thousand SotW ADS clients (200 connections × 10 streams) connect at
// once: all converge, follow a change, and the upstream sees one stream.
func TestChaosThousandsOfClients(t *testing.T) {
	// Not parallel: it takes both cores for a few seconds.
	conns, perConn := scaled(200, 800), 10
	up := xdstest.StartUpstream(t)
	up.SetResources(churn(0))
	r := xdstest.StartRelay(t, up.Addr())
	start := time.Now()
	f := make(fleet, 0, conns*perConn)
	for i := range conns {
		conn := dialFast(t, r.Addr())
		for j := range perConn {
			n := i*perConn + j
			f = append(f, newClient(t, "", fmt.Sprintf("client-%d", n), clientOpts{conn: conn, legacyWildcard: n%2 == 0},
				churnSubs(n)...))
		}
	}
	started := time.Since(start)
	f.waitConverged(t, stateOf(t, churn(0)), fmt.Sprintf("%d clients connecting at once", len(f)))
	converged := time.Since(start)
	up.SetResources(churn(1))
	f.waitConverged(t, stateOf(t, churn(1)), fmt.Sprintf("%d clients after a change", len(f)))
	responses := 0
	for _, c := range f {
		responses += c.Stats().Responses
	}
	t.Logf("%d clients: started in %v, converged after %v, followed a change in %v (for information only); %d responses",
		len(f), started, converged, time.Since(start)-converged, responses)
	if n := up.TotalStreams(); n != 1 {
		t.Errorf("upstream saw %d streams for %d clients, want 1", n, len(f))
	}
	if total, most := f.streamsOpened(); total != len(f) {
		t.Logf("clients opened %d streams for %d clients (one client %d): some were refused and retried", total, len(f), most)
	}
}

// 6. Relay tier2 uses relay tier1 as its upstream. A grpc-go client of tier2
// reaches a backend and follows an EDS change made at the origin, and the
// resources arrive through both tiers byte for byte.
func TestChaosTieredRelays(t *testing.T) {
	t.Parallel()
	const target = "tiered-svc"
	up := xdstest.StartUpstream(t)
	a := xdstest.StartBackend(t, "A")
	b := xdstest.StartBackend(t, "B")
	up.SetResources(xdstest.GRPCResources(target, a.Addr()))
	tier1 := xdstest.StartRelayLogged(t, zaptest.NewLogger(t).Named("tier1"), up.Addr())
	tier2 := xdstest.StartRelayLogged(t, zaptest.NewLogger(t).Named("tier2"), tier1.Addr(),
		xdstest.WithConfig(func(c *config.Config) { c.Node.ID = "xds-relay-tier2" }))

	bootstrap := xdstest.Bootstrap{ServerURI: tier2.Addr(), NodeID: "tiered-client", NodeCluster: "integration"}.JSON()
	builder, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(builder))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n := xdstest.NamesFor(target)
	raw := fleet{newClient(t, tier2.Addr(), "tiered-raw", clientOpts{delta: true},
		namedSub(resource.ListenerType, n.Listener), namedSub(resource.RouteType, n.Route),
		namedSub(resource.ClusterType, n.Cluster), namedSub(resource.EndpointType, n.Endpoints))}

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "A"); err != nil {
		t.Fatalf("first RPC through two relays: %v", err)
	}
	raw.waitConverged(t, stateOf(t, xdstest.GRPCResources(target, a.Addr())), "raw client of tier2")

	up.SetResources(xdstest.GRPCResources(target, b.Addr()))
	ctx, cancel = context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	if err := callUntil(ctx, conn, "B"); err != nil {
		t.Fatalf("after the EDS change to B: %v", err)
	}
	raw.waitConverged(t, stateOf(t, xdstest.GRPCResources(target, b.Addr())), "raw client of tier2 after the change")

	if n := up.TotalStreams(); n != 1 {
		t.Errorf("origin saw %d streams, want 1 (tier1's)", n)
	}
	for _, req := range up.Requests() {
		if id := req.Node.GetId(); id != xdstest.RelayConfig("", "").Node.ID {
			t.Fatalf("origin saw node %q, want tier1's own: %v", id, req)
		}
	}
}

// wantEnd checks that s ends with code and a message containing msg.
// Responses to the stream's earlier, well-formed requests may come first.
func wantEnd(t *testing.T, s grpc.ClientStream, delta bool, code codes.Code, msg string) {
	t.Helper()
	for {
		_, err := recvOne(s, delta)
		if err == nil {
			continue
		}
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
			t.Fatalf("stream ended with %v, want %v containing %q", err, code, msg)
		}
		return
	}
}

// badStreams opens count raw streams spread over conns, alternating SotW
// and Delta, sends each the frames frames(delta) returns and checks that
// each ends with code and msg.
func badStreams(t *testing.T, conns []*grpc.ClientConn, count int, frames func(delta bool) []any, code codes.Code, msg string) {
	t.Helper()
	for i := range count {
		delta := i%2 == 1
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
		s, err := rawADS(ctx, conns[i%len(conns)], delta)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		for _, m := range frames(delta) {
			if err := s.SendMsg(m); err != nil {
				break // the relay may end the stream before the last frame: Recv tells why
			}
		}
		wantEnd(t, s, delta, code, msg)
		cancel()
	}
}

// 7. Bad inputs at volume — malformed frames, oversized messages, unknown
// and invalid type URLs, 100k names, thousands of subscription changes —
// each gets a clear status or is ignored as xDS says, and well-behaved
// clients keep receiving every update.
func TestChaosBadInputsAtVolume(t *testing.T) {
	const maxRecv = 2 << 20
	up := xdstest.StartUpstream(t)
	g := 0
	up.SetResources(churn(g))
	r := xdstest.StartRelay(t, up.Addr(), xdstest.WithConfig(func(c *config.Config) { c.Limits.MaxRecvMessageBytes = maxRecv }))
	good := churnFleet(t, r.Addr(), 2)
	good.waitConverged(t, stateOf(t, churn(g)), "good clients")
	stillServed := func(t *testing.T) {
		t.Helper()
		g++
		up.SetResources(churn(g))
		good.waitConverged(t, stateOf(t, churn(g)), "good clients after "+t.Name())
	}
	conns := make([]*grpc.ClientConn, 8)
	for i := range conns {
		conns[i] = dialFast(t, r.Addr())
	}
	node := &core.Node{Id: "bad"}
	first := func(delta bool) any {
		if delta {
			return &discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}}
		}
		return &discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}
	}
	repeat := scaled(10, 200)

	t.Run("malformed frames", func(t *testing.T) {
		malformed := map[string]func(delta bool) rawFrame{
			"length past the end": func(bool) rawFrame { return rawFrame{0x0a, 0xff, 0xff, 0xff, 0x0f, 'x'} },
			"truncated varint":    func(bool) rawFrame { return rawFrame{0x08, 0xff} },
			"tag overflow":        func(bool) rawFrame { return rawFrame{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01} },
			"field number 0":      func(bool) rawFrame { return rawFrame{0x02, 0x00} },
			"type_url not UTF-8": func(delta bool) rawFrame {
				if delta {
					return rawFrame{0x12, 0x02, 0xc3, 0x28} // DeltaDiscoveryRequest.type_url = 2
				}
				return rawFrame{0x22, 0x02, 0xc3, 0x28} // DiscoveryRequest.type_url = 4
			},
		}
		for _, name := range sortedNames(malformed) {
			frame := malformed[name]
			// First frame of a stream, and after a good first request.
			badStreams(t, conns, repeat, func(delta bool) []any { return []any{frame(delta)} },
				codes.Internal, "unmarshal")
			badStreams(t, conns, repeat, func(delta bool) []any { return []any{first(delta), frame(delta)} },
				codes.Internal, "unmarshal")
		}
		stillServed(t)
	})

	t.Run("oversized messages", func(t *testing.T) {
		big := make([]string, 1500) // 3 MB in 1,500 names: under the name limit, over the size limit
		for i := range big {
			big[i] = fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 2000))
		}
		badStreams(t, conns, repeat, func(delta bool) []any {
			if delta {
				return []any{&discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: big}}
			}
			return []any{&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: big}}
		}, codes.ResourceExhausted, "larger than max")
		stillServed(t)
	})

	t.Run("invalid type URLs", func(t *testing.T) {
		for _, typeURL := range []string{"", "not a type url", "type.googleapis.com/", "/", strings.Repeat("a", 600) + "/x.Y"} {
			msg := "malformed type_url"
			if typeURL == "" {
				msg = "type_url is required"
			}
			badStreams(t, conns, repeat, func(delta bool) []any {
				if delta {
					return []any{&discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNamesSubscribe: []string{"x"}}}
				}
				return []any{&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: []string{"x"}}}
			}, codes.InvalidArgument, msg)
		}
		stillServed(t)
	})

	t.Run("unknown types are relayed", func(t *testing.T) {
		// xDS: any type URL is relayed. The upstream knows none of these, so
		// nothing comes back, and the streams stay open: their CDS
		// subscriptions are served as usual.
		var f fleet
		for i := range repeat {
			subs := []sub{wildcardSub(resource.ClusterType)}
			for k := range 5 {
				subs = append(subs, namedSub(fmt.Sprintf("type.googleapis.com/chaos.Unknown%d", (i+k)%7), "x", "y"))
			}
			f = append(f, newClient(t, "", fmt.Sprintf("unknown-%d", i), clientOpts{conn: conns[i%len(conns)], delta: i%2 == 1}, subs...))
		}
		stillServed(t)
		f.waitConverged(t, stateOf(t, churn(g)), "clients of unknown types")
		if _, most := f.streamsOpened(); most != 1 {
			t.Errorf("a client of unknown types had to reopen its stream (%d streams)", most)
		}
		for _, c := range f {
			c.Close()
		}
	})

	t.Run("100k names", func(t *testing.T) {
		// One more than limits.max_names_per_request: the EDS request is
		// refused, and the stream goes on serving CDS.
		names := make([]string, config.DefaultMaxNamesPerRequest+1)
		for i := range names {
			names[i] = fmt.Sprintf("n%06d", i)
		}
		for i := range repeat/5 + 1 {
			delta := i%2 == 1
			ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
			s, err := rawADS(ctx, conns[i%len(conns)], delta)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			var eds any = &discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: names}
			if delta {
				eds = &discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: names}
			}
			for _, m := range []any{eds, first(delta)} {
				if err := s.SendMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := recvOne(s, delta); err != nil {
				t.Fatalf("CDS on a stream after an EDS request over the limit: %v", err)
			}
			cancel()
		}
		stillServed(t)
	})

	t.Run("rapid subscribe and unsubscribe", func(t *testing.T) {
		changes := scaled(2000, 20000)
		f := fleet{
			newClient(t, "", "flapper-sotw", clientOpts{conn: conns[0]}, wildcardSub(resource.ClusterType)),
			newClient(t, "", "flapper-delta", clientOpts{conn: conns[1], delta: true}, wildcardSub(resource.ClusterType)),
		}
		for i := range changes {
			var names []string
			for k := range numStable {
				if (i>>k)&1 == 1 || (i*7+k)%5 == 0 {
					names = append(names, stableEndpoints(k))
				}
			}
			for _, c := range f {
				c.SetSub(namedSub(resource.EndpointType, names...))
				if i%3 == 0 {
					c.SetSub(wildcardSub(resource.ClusterType))
				} else if i%3 == 1 {
					c.SetSub(namedSub(resource.ClusterType, stableCluster(i%numStable), "x00", "nonexistent"))
				}
			}
		}
		final := namedSub(resource.EndpointType, stableEndpoints(2), stableEndpoints(5), stableEndpoints(9))
		for _, c := range f {
			c.SetSub(final)
			c.SetSub(wildcardSub(resource.ClusterType))
		}
		f.waitConverged(t, stateOf(t, churn(g)), fmt.Sprintf("after %d subscription changes", changes))
		stillServed(t)
		f.waitConverged(t, stateOf(t, churn(g)), "flappers after an update")
		if _, most := f.streamsOpened(); most != 1 {
			t.Errorf("a flapping client lost its stream (%d streams)", most)
		}
	})

	if n := up.TotalStreams(); n != 1 {
		t.Errorf("upstream saw %d streams, want 1: bad inputs reached it", n)
	}
}

// sortedNames returns m's keys in order.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A SotW client unsubscribes a name and subscribes to it again while a
// response is in flight, so both requests carry a stale nonce; then it ACKs
// that response with its current names. Having unsubscribed, the client no
// longer holds the resource, so it is newly requested and must be sent
// again (PROTOCOL.md: "Newly requested names must always be sent"); the
// stale nonce only means the requests themselves get no answer. This is the
// minimal case of "rapid subscribe and unsubscribe" above.
func TestChaosStaleUnsubscribeResubscribe(t *testing.T) {
	e1, e2 := stableEndpoints(1), stableEndpoints(2)
	endpoints := func(port int) xdstest.Resources {
		return xdstest.Resources{resource.EndpointType: {
			xdstest.Endpoints(e1, fmt.Sprintf("127.0.0.1:%d", port)),
			xdstest.Endpoints(e2, "127.0.0.1:2000"),
		}}
	}
	up := xdstest.StartUpstream(t)
	up.SetResources(endpoints(1000))
	r := xdstest.StartRelay(t, up.Addr())
	c := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "flapper"})
	c.Subscribe(resource.EndpointType, e1, e2)
	r1 := c.RecvType(resource.EndpointType)
	c.Ack(r1)

	up.SetResources(endpoints(1001))
	r2 := c.RecvType(resource.EndpointType) // the relay sent it: r1's nonce is stale now
	for _, names := range [][]string{{e1}, {e1, e2}} {
		if err := c.Send(xdstest.SotWRequest(resource.EndpointType, r1.GetVersionInfo(), r1.GetNonce(), names...)); err != nil {
			t.Fatal(err)
		}
	}
	c.Ack(r2) // names {e1, e2}, r2's nonce

	resp := c.RecvType(resource.EndpointType)
	var got []string
	for _, a := range resp.GetResources() {
		name, err := resourceName(a.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
	}
	if !slices.Contains(got, e2) {
		t.Fatalf("response after the re-subscription carries %v, want %s", got, e2)
	}
}

// A Delta client drops its CDS wildcard for one name and takes it back at
// once (two requests sent back to back): it must end up holding every
// cluster, and no response may both send and remove a name (Envoy NACKs
// that). The minimal case of the CDS part of "rapid subscribe and
// unsubscribe" above.
func TestChaosDeltaWildcardToggle(t *testing.T) {
	up := xdstest.StartUpstream(t)
	g := 0
	up.SetResources(churn(g))
	r := xdstest.StartRelay(t, up.Addr())
	f := fleet{newClient(t, r.Addr(), "toggler", clientOpts{delta: true}, wildcardSub(resource.ClusterType))}
	f.waitConverged(t, stateOf(t, churn(g)), "wildcard")

	f[0].SetSub(namedSub(resource.ClusterType, stableCluster(1))) // subscribe c01, unsubscribe *
	f[0].SetSub(wildcardSub(resource.ClusterType))                // subscribe *, unsubscribe c01
	f.waitConverged(t, stateOf(t, churn(g)), "wildcard again")
	g++
	up.SetResources(churn(g))
	f.waitConverged(t, stateOf(t, churn(g)), "wildcard again, after an update")
}
