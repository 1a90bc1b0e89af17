package integration_test

// Helpers of the chaos and soak tests (chaos_test.go, soak_test.go):
//
//   - xdsClient, a raw SotW or Delta ADS client that runs on its own
//     goroutine, ACKs every response, keeps what it was sent (by the SHA-256
//     of each resource's bytes) and redials when its stream ends;
//   - state and stateOf, the expected content, compared by resource bytes;
//   - churn, an upstream content generator whose every generation changes
//     CDS and EDS, adds and removes clusters;
//   - relayProc, a relay that can be closed and started again on the same
//     address;
//   - rawADS, a stream that sends arbitrary bytes, for malformed frames.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// resHash is the SHA-256 of a resource's bytes as sent on the wire.
type resHash [sha256.Size]byte

// state is what a client holds or should hold: type URL → resource name →
// hash of the resource's bytes.
type state map[string]map[string]resHash

// stateOf is the content of an upstream serving res. go-control-plane
// marshals every resource with cache.MarshalResource and the relay forwards
// those bytes unchanged, so the hashes must match what clients receive.
func stateOf(tb testing.TB, res xdstest.Resources) state {
	tb.Helper()
	out := state{}
	for typ, rs := range res {
		m := make(map[string]resHash, len(rs))
		for _, r := range rs {
			b, err := cache.MarshalResource(r)
			if err != nil {
				tb.Fatalf("marshal %s: %v", cache.GetResourceName(r), err)
			}
			m[cache.GetResourceName(r)] = sha256.Sum256(b)
		}
		out[typ] = m
	}
	return out
}

// fullState reports whether SotW responses of typeURL carry the whole
// subscribed set (xDS: LDS and CDS), so that a resource missing from one is
// deleted on the client.
func fullState(typeURL string) bool {
	return typeURL == resource.ListenerType || typeURL == resource.ClusterType
}

// sub is one type's subscription: every resource (wildcard; LDS/CDS only)
// or the named ones.
type sub struct {
	typeURL  string
	wildcard bool
	names    []string
}

func wildcardSub(typeURL string) sub { return sub{typeURL: typeURL, wildcard: true} }

func namedSub(typeURL string, names ...string) sub {
	return sub{typeURL: typeURL, names: slices.Clone(names)}
}

func (s sub) wants(name string) bool { return s.wildcard || slices.Contains(s.names, name) }

// expect is the part of all a client subscribed with subs must hold.
func expect(all state, subs map[string]sub) state {
	out := state{}
	for t, s := range subs {
		m := map[string]resHash{}
		for n, h := range all[t] {
			if s.wants(n) {
				m[n] = h
			}
		}
		out[t] = m
	}
	return out
}

// diffState describes how got differs from want (at most a few lines), or
// returns "" when they are equal.
func diffState(want, got state) string {
	var lines []string
	types := slices.Sorted(maps.Keys(want))
	for _, t := range types {
		short := t[strings.LastIndexByte(t, '.')+1:]
		w, g := want[t], got[t]
		for _, n := range slices.Sorted(maps.Keys(w)) {
			gh, ok := g[n]
			switch {
			case !ok:
				lines = append(lines, fmt.Sprintf("%s %q missing", short, n))
			case gh != w[n]:
				lines = append(lines, fmt.Sprintf("%s %q stale (other bytes)", short, n))
			}
		}
		for _, n := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[n]; !ok {
				lines = append(lines, fmt.Sprintf("%s %q held but deleted upstream", short, n))
			}
		}
	}
	if len(lines) > 6 {
		lines = append(lines[:6], fmt.Sprintf("... %d more", len(lines)-6))
	}
	return strings.Join(lines, "; ")
}

// resourceName reads a resource's name from its bytes: field 1, a string,
// in every envoy resource type (Listener, RouteConfiguration, Cluster,
// ClusterLoadAssignment's cluster_name, ...).
func resourceName(b []byte) (string, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", errors.New("bad resource bytes")
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeString(b)
			if m < 0 {
				return "", errors.New("bad resource name")
			}
			return v, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return "", errors.New("bad resource bytes")
		}
		b = b[m:]
	}
	return "", nil
}

// Churn content: numStable clusters c00.. (EDS service e00..) and their
// ClusterLoadAssignments, always present, plus three extra clusters x..
// that come and go. Every generation changes c00 and e00 and one more of
// each, and shifts the extra clusters by one.
const numStable = 10

func stableCluster(i int) string   { return fmt.Sprintf("c%02d", i) }
func stableEndpoints(i int) string { return fmt.Sprintf("e%02d", i) }

// churn is generation g of the churn content.
func churn(g int) xdstest.Resources {
	var cs, es []types.Resource
	for i := range numStable {
		c := xdstest.EDSCluster(stableCluster(i), stableEndpoints(i))
		if i == 0 || i == g%numStable {
			c.AltStatName = fmt.Sprintf("gen-%d", g)
		}
		cs = append(cs, c)
		port := 1000 + i
		if i == 0 || i == (g+3)%numStable {
			port = 1000 + (g*numStable+i)%60000
		}
		es = append(es, xdstest.Endpoints(stableEndpoints(i), fmt.Sprintf("127.0.0.1:%d", port)))
	}
	for k := g % 7; k < g%7+3; k++ {
		cs = append(cs, xdstest.EDSCluster(fmt.Sprintf("x%02d", k), "ex"))
	}
	return xdstest.Resources{resource.ClusterType: cs, resource.EndpointType: es}
}

// churnSubs is the subscription of client i of a churn test: every cluster
// and three of the ClusterLoadAssignments (always e00).
func churnSubs(i int) []sub {
	return []sub{
		wildcardSub(resource.ClusterType),
		namedSub(resource.EndpointType, stableEndpoints(0), stableEndpoints(1+i%(numStable-1)),
			stableEndpoints(1+(i+4)%(numStable-1))),
	}
}

// dialFast connects to addr with short reconnect backoff (grpc's default
// starts at 1 s) and closes the connection when the test ends.
func dialFast(tb testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, append(fastDialOptions(), opts...)...)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

func fastDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
}

// clientOpts configure newClient.
type clientOpts struct {
	// delta selects the incremental protocol; default SotW.
	delta bool
	// legacyWildcard makes a SotW client ask for a wildcard with an empty
	// name list rather than "*". Only for clients that never name resources
	// of that type: once a stream named some, an empty list means none.
	legacyWildcard bool
	// conn is a connection to share with other clients; nil: the client
	// dials addr on its own connection.
	conn *grpc.ClientConn
}

// xdsClient is a raw ADS client (SotW or Delta) on its own goroutines: it
// ACKs every response, keeps the resources it was sent and, when its stream
// ends, opens a new one (waiting for the connection to be ready) with its
// current subscriptions — SotW with the last ACKed versions, Delta with
// initial_resource_versions — as Envoy does.
//
// All methods are safe for concurrent use.
type xdsClient struct {
	// Set at creation, read-only.
	id      string
	node    *core.Node
	delta   bool
	legacy  bool
	conn    *grpc.ClientConn
	ownConn bool // conn is the client's own: Close closes it
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns
	wake    chan struct{} // one slot: requests are queued

	// Guarded by mu.
	mu        sync.Mutex
	order     []string                        // subscribed types, in subscription order
	subs      map[string]sub                  // by type URL
	held      state                           // what the client holds
	gotAt     map[string]map[string]time.Time // type → name → when it last received the resource
	droppedAt map[string]map[string]time.Time // type → name ("*": the wildcard) → when a subscription change dropped it
	history   []string                        // the last requests and responses, for problem reports
	versions  map[string]map[string]string    // Delta: type → name → version held
	nonces    map[string]string               // SotW: type → last nonce on this stream
	acked     map[string]string               // SotW: type → last version ACKed
	out       []proto.Message                 // requests waiting for the sender
	streams   int                             // streams opened
	responses int                             // responses received
	lastErr   error                           // why the last stream ended
	problems  []string                        // protocol violations seen
	changed   chan struct{}                   // closed and replaced on every change
}

// newClient starts a client with node id id, subscribed to subs, against the
// relay at addr (or on opts.conn). It is closed when the test ends.
func newClient(tb testing.TB, addr, id string, opts clientOpts, subs ...sub) *xdsClient {
	tb.Helper()
	conn, own := opts.conn, false
	if conn == nil {
		var err error
		if conn, err = grpc.NewClient(addr, fastDialOptions()...); err != nil {
			tb.Fatalf("dial %s: %v", addr, err)
		}
		own = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &xdsClient{
		id:        id,
		node:      &core.Node{Id: id, Cluster: "chaos"},
		delta:     opts.delta,
		legacy:    opts.legacyWildcard,
		conn:      conn,
		ownConn:   own,
		ctx:       ctx,
		cancel:    cancel,
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		subs:      map[string]sub{},
		held:      state{},
		gotAt:     map[string]map[string]time.Time{},
		droppedAt: map[string]map[string]time.Time{},
		versions:  map[string]map[string]string{},
		nonces:    map[string]string{},
		acked:     map[string]string{},
		changed:   make(chan struct{}),
	}
	for _, s := range subs {
		c.order = append(c.order, s.typeURL)
		c.subs[s.typeURL] = s
		c.held[s.typeURL] = map[string]resHash{}
		c.versions[s.typeURL] = map[string]string{}
	}
	go c.run()
	tb.Cleanup(c.Close)
	return c
}

// Close stops the client, waits for its goroutines and closes its own
// connection. Idempotent.
func (c *xdsClient) Close() {
	c.cancel()
	<-c.done
	if c.ownConn {
		_ = c.conn.Close() // a second Close only returns an error
	}
}

func (c *xdsClient) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// notifyLocked wakes every waiter. Call with mu held.
func (c *xdsClient) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// run keeps a stream open until Close, redialling with a short backoff.
func (c *xdsClient) run() {
	defer close(c.done)
	fails := 0
	for {
		received, err := c.session()
		if c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.lastErr = err
		c.notifyLocked()
		c.mu.Unlock()
		if received {
			fails = 0
		}
		d := min(5*time.Millisecond<<min(fails, 10), 300*time.Millisecond)
		fails++
		t := time.NewTimer(d)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C: // backoff before redialling
		}
	}
}

// session runs one stream: the subscriptions go out first, then every
// response is applied and ACKed until the stream fails.
func (c *xdsClient) session() (received bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(c.conn)
	var s grpc.ClientStream
	if c.delta {
		s, err = ads.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
	} else {
		s, err = ads.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	}
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	c.mu.Lock()
	c.streams++
	c.nonces = map[string]string{}
	c.out = c.initialLocked()
	c.mu.Unlock()
	c.signal()

	sendDone := make(chan error, 1)
	go func() { sendDone <- c.sendLoop(ctx, s) }()
	for {
		var resp proto.Message = &discoverygrpc.DiscoveryResponse{}
		if c.delta {
			resp = &discoverygrpc.DeltaDiscoveryResponse{}
		}
		if err = s.RecvMsg(resp); err != nil {
			break
		}
		received = true
		c.mu.Lock()
		c.traceLocked("<- %s", brief(resp))
		if c.delta {
			c.applyDeltaLocked(resp.(*discoverygrpc.DeltaDiscoveryResponse))
		} else {
			c.applySotWLocked(resp.(*discoverygrpc.DiscoveryResponse))
		}
		c.responses++
		c.notifyLocked()
		c.mu.Unlock()
		c.signal()
	}
	cancel()
	<-sendDone
	return received, err
}

// sendLoop is the stream's only sender.
func (c *xdsClient) sendLoop(ctx context.Context, s grpc.ClientStream) error {
	for {
		c.mu.Lock()
		out := c.out
		c.out = nil
		for _, m := range out {
			c.traceLocked("-> %s", brief(m))
		}
		c.mu.Unlock()
		for _, m := range out {
			if err := s.SendMsg(m); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		}
	}
}

// brief is a one-line summary of an xDS request or response.
func brief(m proto.Message) string {
	short := func(t string) string { return t[strings.LastIndexByte(t, '.')+1:] }
	switch m := m.(type) {
	case *discoverygrpc.DiscoveryRequest:
		return fmt.Sprintf("%s v=%s n=%s names=%v", short(m.GetTypeUrl()), m.GetVersionInfo(), m.GetResponseNonce(), m.GetResourceNames())
	case *discoverygrpc.DeltaDiscoveryRequest:
		return fmt.Sprintf("%s n=%s sub=%v unsub=%v", short(m.GetTypeUrl()), m.GetResponseNonce(),
			m.GetResourceNamesSubscribe(), m.GetResourceNamesUnsubscribe())
	case *discoverygrpc.DiscoveryResponse:
		var names []string
		for _, a := range m.GetResources() {
			n, _ := resourceName(a.GetValue())
			names = append(names, n)
		}
		return fmt.Sprintf("%s v=%s n=%s %v", short(m.GetTypeUrl()), m.GetVersionInfo(), m.GetNonce(), names)
	case *discoverygrpc.DeltaDiscoveryResponse:
		var names []string
		for _, r := range m.GetResources() {
			names = append(names, r.GetName())
		}
		return fmt.Sprintf("%s n=%s +%v -%v", short(m.GetTypeUrl()), m.GetNonce(), names, m.GetRemovedResources())
	}
	return fmt.Sprintf("%T", m)
}

// sotwNames is the resource_names of a SotW request for s.
func (c *xdsClient) sotwNames(s sub) []string {
	switch {
	case s.wildcard && c.legacy:
		return nil
	case s.wildcard:
		return []string{"*"}
	}
	return slices.Clone(s.names)
}

// initialLocked builds a new stream's first requests; the node goes on the
// first. Call with mu held.
func (c *xdsClient) initialLocked() []proto.Message {
	var out []proto.Message
	for i, t := range c.order {
		s := c.subs[t]
		var node *core.Node
		if i == 0 {
			node = c.node
		}
		if c.delta {
			names := slices.Clone(s.names)
			if s.wildcard {
				names = []string{"*"}
			}
			out = append(out, &discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: t,
				ResourceNamesSubscribe: names, InitialResourceVersions: maps.Clone(c.versions[t])})
			continue
		}
		out = append(out, &discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: t,
			VersionInfo: c.acked[t], ResourceNames: c.sotwNames(s)})
	}
	return out
}

// traceLocked keeps a line of the client's recent history. Call with mu
// held.
func (c *xdsClient) traceLocked(format string, args ...any) {
	const keep = 48
	if len(c.history) == keep {
		c.history = c.history[1:]
	}
	c.history = append(c.history, fmt.Sprintf(format, args...))
}

// receivedLocked notes that the client received name of typeURL now. Call
// with mu held.
func (c *xdsClient) receivedLocked(typeURL, name string) {
	if c.gotAt[typeURL] == nil {
		c.gotAt[typeURL] = map[string]time.Time{}
	}
	c.gotAt[typeURL][name] = time.Now()
}

// lostLocked checks a resource the client is told is gone against the
// upstreams (xdstest.ServedSince): it must have been missing upstream at
// some point since the client received it. Checked at every response, not
// only once the fleet converged: a removal sent and then repaired is an
// outage all the same. Call with mu held.
func (c *xdsClient) lostLocked(typeURL, name string) {
	// inFlight bounds how long a subscription change may wait for its
	// answer behind the responses already on their way.
	const inFlight = 10 * time.Second
	got, ok := c.gotAt[typeURL][name]
	// A removal may answer the client's own change: requests are pipelined,
	// so one that dropped the name (or the wildcard) may be answered after a
	// later response sent it again (a Delta unsubscription of a name the
	// wildcard still covers is answered by the resource or its removal).
	// A drop since the client received the name, or a recent one still in
	// flight, explains the removal.
	answers := func(dropped time.Time) bool {
		return dropped.After(got) || time.Since(dropped) < inFlight
	}
	asked := answers(c.droppedAt[typeURL][name]) || answers(c.droppedAt[typeURL]["*"])
	if ok && !asked && xdstest.PhantomLoss(typeURL, name, c.held[typeURL][name]) {
		c.problemLocked("phantom loss: told %s %q is gone, which the upstream has served without a break since the content the client holds; last messages:\n  %s",
			typeURL, name, strings.Join(c.history, "\n  "))
	}
	delete(c.gotAt[typeURL], name)
}

func (c *xdsClient) problemLocked(format string, args ...any) {
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// applySotWLocked applies a SotW response and queues its ACK. Call with mu
// held.
func (c *xdsClient) applySotWLocked(resp *discoverygrpc.DiscoveryResponse) {
	t := resp.GetTypeUrl()
	c.nonces[t] = resp.GetNonce()
	s, ok := c.subs[t]
	if !ok {
		c.problemLocked("SotW response for unsubscribed type %s", t)
		return
	}
	got := make(map[string]resHash, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		name, err := resourceName(a.GetValue())
		if err != nil {
			c.problemLocked("%s: %v", t, err)
			continue
		}
		if _, dup := got[name]; dup {
			c.problemLocked("%s %q twice in one response", t, name)
		}
		got[name] = sha256.Sum256(a.GetValue())
	}
	h := c.held[t]
	if fullState(t) {
		for n := range h {
			if _, kept := got[n]; !kept {
				c.lostLocked(t, n)
			}
		}
		h = map[string]resHash{} // xDS: a resource missing from an LDS/CDS response is deleted
	}
	for n, hash := range got {
		if s.wants(n) {
			h[n] = hash
			c.receivedLocked(t, n)
		}
	}
	c.held[t] = h
	c.acked[t] = resp.GetVersionInfo()
	c.out = append(c.out, &discoverygrpc.DiscoveryRequest{TypeUrl: t, VersionInfo: resp.GetVersionInfo(),
		ResponseNonce: resp.GetNonce(), ResourceNames: c.sotwNames(s)})
}

// applyDeltaLocked applies a Delta response and queues its ACK. Call with mu
// held.
func (c *xdsClient) applyDeltaLocked(resp *discoverygrpc.DeltaDiscoveryResponse) {
	t := resp.GetTypeUrl()
	s, ok := c.subs[t]
	if !ok {
		c.problemLocked("Delta response for unsubscribed type %s", t)
		return
	}
	h, v := c.held[t], c.versions[t]
	seen := map[string]bool{}
	for _, r := range resp.GetResources() {
		name := r.GetName()
		if seen[name] {
			c.problemLocked("%s %q twice in one response", t, name)
		}
		seen[name] = true
		if !s.wants(name) || r.GetResource() == nil {
			continue // an unsubscribed name in flight, or a TTL heartbeat
		}
		h[name] = sha256.Sum256(r.GetResource().GetValue())
		v[name] = r.GetVersion()
		c.receivedLocked(t, name)
	}
	for _, name := range resp.GetRemovedResources() {
		if seen[name] {
			// Envoy NACKs such a response ("duplicate name found in the union
			// of added+removed resources").
			c.problemLocked("%s %q both sent and removed in one response", t, name)
		}
		if _, held := h[name]; held {
			c.lostLocked(t, name)
		}
		delete(h, name)
		delete(v, name)
	}
	c.out = append(c.out, &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()})
}

// SetSub changes the subscription of s.typeURL, as a client whose needs
// change does: names no longer wanted are forgotten at once.
func (c *xdsClient) SetSub(s sub) {
	c.mu.Lock()
	t := s.typeURL
	old, had := c.subs[t]
	if !had {
		c.order = append(c.order, t)
		c.held[t] = map[string]resHash{}
		c.versions[t] = map[string]string{}
	}
	c.subs[t] = s
	if c.droppedAt[t] == nil {
		c.droppedAt[t] = map[string]time.Time{}
	}
	for _, n := range old.names {
		if !slices.Contains(s.names, n) {
			c.droppedAt[t][n] = time.Now()
		}
	}
	if old.wildcard && !s.wildcard {
		c.droppedAt[t]["*"] = time.Now()
	}
	for n := range c.held[t] {
		if !s.wants(n) {
			delete(c.held[t], n)
			delete(c.versions[t], n)
		}
	}
	if c.delta {
		req := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t}
		if !had && len(c.order) == 1 {
			req.Node = c.node
		}
		for _, n := range s.names {
			if !slices.Contains(old.names, n) {
				req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
			}
		}
		for _, n := range old.names {
			if !slices.Contains(s.names, n) {
				req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
			}
		}
		switch {
		case s.wildcard && !old.wildcard:
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, "*")
		case !s.wildcard && old.wildcard:
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, "*")
		}
		c.out = append(c.out, req)
	} else {
		c.out = append(c.out, &discoverygrpc.DiscoveryRequest{TypeUrl: t, VersionInfo: c.acked[t],
			ResponseNonce: c.nonces[t], ResourceNames: c.sotwNames(s)})
	}
	c.notifyLocked()
	c.mu.Unlock()
	c.signal()
}

// clientStats is a consistent view of a client's counters.
type clientStats struct {
	Streams, Responses int
	LastErr            error
	Problems           []string
}

func (c *xdsClient) Stats() clientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clientStats{c.streams, c.responses, c.lastErr, slices.Clone(c.problems)}
}

// Held returns a copy of what the client holds.
func (c *xdsClient) Held() state {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := state{}
	for t, m := range c.held {
		out[t] = maps.Clone(m)
	}
	return out
}

// diffLocked compares what the client holds with its part of all. Call with
// mu held.
func (c *xdsClient) diffLocked(all state) string {
	return diffState(expect(all, c.subs), c.held)
}

// WaitFor blocks until the client holds exactly its part of all, or ctx
// ends (the error then says what differs), or the client saw a protocol
// violation.
func (c *xdsClient) WaitFor(ctx context.Context, all state) error {
	for {
		c.mu.Lock()
		diff := c.diffLocked(all)
		ch := c.changed
		last := c.lastErr
		problems := slices.Clone(c.problems)
		c.mu.Unlock()
		if len(problems) > 0 {
			return fmt.Errorf("client %s (delta=%v): protocol violations: %s", c.id, c.delta, strings.Join(problems, "; "))
		}
		if diff == "" {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("client %s (delta=%v): %w: %s (last stream error: %v)", c.id, c.delta, ctx.Err(), diff, last)
		}
	}
}

// fleet is a set of clients checked together.
type fleet []*xdsClient

// waitConverged waits until every client holds exactly its part of all,
// then checks that no client saw a protocol violation. It fails when the
// fleet makes no progress for xdstest.WaitTimeout: a client waits on while
// others still get responses, since a busy machine serves it later, not never.
func (f fleet) waitConverged(tb testing.TB, all state, what string) {
	tb.Helper()
	for _, c := range f {
		var err error
		for progress := -1; ; {
			ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
			err = c.WaitFor(ctx, all)
			cancel()
			now := f.responses()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || now == progress {
				break
			}
			progress = now // the fleet moved during the wait: wait on
		}
		if err != nil {
			// Report the first failure and how the others stand now.
			behind := 0
			for _, o := range f {
				o.mu.Lock()
				if o.diffLocked(all) != "" {
					behind++
				}
				o.mu.Unlock()
			}
			tb.Fatalf("%s: %d of %d clients did not converge; first: %v (stats %+v)", what, behind, len(f), err, c.Stats())
		}
	}
	f.checkHeld(tb, all, what)
}

// responses counts the responses the fleet's clients received.
func (f fleet) responses() int {
	n := 0
	for _, c := range f {
		n += c.Stats().Responses
	}
	return n
}

// checkHeld fails the test unless every client holds exactly its part of
// all now and saw no protocol violation.
func (f fleet) checkHeld(tb testing.TB, all state, what string) {
	tb.Helper()
	bad := 0
	for _, c := range f {
		c.mu.Lock()
		diff := c.diffLocked(all)
		problems := slices.Clone(c.problems)
		c.mu.Unlock()
		if diff != "" || len(problems) > 0 {
			if bad++; bad <= 5 {
				tb.Errorf("%s: client %s (delta=%v): %s %v", what, c.id, c.delta, diff, problems)
			}
		}
	}
	if bad > 0 {
		tb.FailNow()
	}
}

// streamsOpened sums the streams the clients opened.
func (f fleet) streamsOpened() (total, most int) {
	for _, c := range f {
		s := c.Stats().Streams
		total += s
		most = max(most, s)
	}
	return total, most
}

// relayProc is a relay that can be closed and started again on the same
// address, as a restarted process would be. Only the test goroutine uses it.
type relayProc struct {
	tb       testing.TB
	log      *zap.Logger
	addr     string
	upstream string
	opts     []xdstest.RelayOption

	r    *relay.Relay
	done chan error // Serve's result
}

// startRelayProc starts a relay on 127.0.0.1:0 in front of upstreamAddr. It
// is stopped when the test ends.
func startRelayProc(tb testing.TB, log *zap.Logger, upstreamAddr string, opts ...xdstest.RelayOption) *relayProc {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("relay listen: %v", err)
	}
	p := &relayProc{tb: tb, log: log, addr: lis.Addr().String(), upstream: upstreamAddr, opts: opts}
	p.serve(lis)
	tb.Cleanup(p.Stop)
	return p
}

// Addr is the relay's address; it stays the same across Start.
func (p *relayProc) Addr() string { return p.addr }

// Relay is the running relay, nil while stopped.
func (p *relayProc) Relay() *relay.Relay { return p.r }

func (p *relayProc) serve(lis net.Listener) {
	p.tb.Helper()
	cfg := xdstest.RelayConfig(p.addr, p.upstream)
	for _, o := range p.opts {
		o(cfg)
	}
	r, err := relay.New(cfg, p.log)
	if err != nil {
		_ = lis.Close()
		p.tb.Fatalf("relay.New: %v", err)
	}
	p.r, p.done = r, make(chan error, 1)
	go func() { p.done <- r.Serve(lis) }()
}

// Stop closes the relay and waits for Serve to return. Idempotent.
func (p *relayProc) Stop() {
	p.tb.Helper()
	if p.r == nil {
		return
	}
	p.r.Close()
	select {
	case err := <-p.done:
		if err != nil {
			p.tb.Errorf("relay Serve: %v", err)
		}
	case <-time.After(xdstest.WaitTimeout):
		p.tb.Errorf("relay Serve did not return within %v of Close", xdstest.WaitTimeout)
	}
	p.r = nil
}

// Start starts a new relay on the same address (waiting, within
// xdstest.WaitTimeout, for the port to be free).
func (p *relayProc) Start() {
	p.tb.Helper()
	p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	var lc net.ListenConfig
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		lis, err := lc.Listen(ctx, "tcp", p.addr)
		if err == nil {
			p.serve(lis)
			return
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			p.tb.Fatalf("relay listen %s: %v", p.addr, err)
		}
		select {
		case <-ctx.Done():
			p.tb.Fatalf("relay restart: %s still in use", p.addr)
		case <-tick.C: // the old socket may linger briefly; poll for it
		}
	}
}

// rawFrame is a message sent as its bytes, whatever they are.
type rawFrame []byte

// rawCodec sends rawFrame as is and everything else as protobuf, so that a
// client stream can carry malformed frames between well-formed ones.
type rawCodec struct{}

var protoCodec = encoding.GetCodecV2(grpcproto.Name)

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(rawFrame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f)}, nil
	}
	return protoCodec.Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

func (rawCodec) Name() string { return grpcproto.Name }

// adsMethods are the full names of the ADS methods.
const (
	sotwMethod  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	deltaMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// rawADS opens an ADS stream (SotW or Delta) on conn that sends whatever it
// is given (rawFrame or a proto message). It ends when ctx does.
func rawADS(ctx context.Context, conn *grpc.ClientConn, delta bool) (grpc.ClientStream, error) {
	method := sotwMethod
	if delta {
		method = deltaMethod
	}
	desc := &grpc.StreamDesc{StreamName: method[strings.LastIndexByte(method, '/')+1:], ServerStreams: true, ClientStreams: true}
	s, err := conn.NewStream(ctx, desc, method, grpc.ForceCodecV2(rawCodec{}), grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("open raw stream: %w", err)
	}
	return s, nil
}

// recvOne receives one response on s (a SotW or Delta stream), or the
// stream's error; the stream's context bounds the wait.
func recvOne(s grpc.ClientStream, delta bool) (proto.Message, error) {
	var m proto.Message = &discoverygrpc.DiscoveryResponse{}
	if delta {
		m = &discoverygrpc.DeltaDiscoveryResponse{}
	}
	if err := s.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}
