package oracle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clustersvc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointsvc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenersvc "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routesvc "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
)

// Shape is how a simulated client subscribes.
type Shape int

const (
	// Envoy subscribes LDS and CDS by wildcard, RDS and EDS by the names
	// what it holds refers to.
	Envoy Shape = iota
	// GRPC subscribes one listener by name and follows its references:
	// its route, the route's cluster, the cluster's endpoints (grpc-go).
	GRPC
)

func (s Shape) String() string { return [...]string{"envoy", "grpc"}[s] }

// ClientSpec says what a simulated client is.
type ClientSpec struct {
	ID    string
	Shape Shape
	Delta bool
	// PerType puts each type on its own stream (no ADS: no make-before-break
	// across types is expected).
	PerType bool
	// Env is the client's TP2 parameter (GRPC shape: locators for CDS and
	// EDS); "" for none.
	Env string
	// Picky clients NACK bad versions.
	Picky bool
	// Glob clients subscribe the glob collection globName too (Dims.Glob).
	Glob bool
	// REST clients poll each type over REST-JSON (PerType, SotW; Dims.REST).
	REST bool
}

func (s ClientSpec) String() string {
	proto := "sotw"
	if s.Delta {
		proto = "delta"
	}
	svc := "ads"
	if s.PerType {
		svc = "per-type"
	}
	if s.REST {
		proto, svc = "rest", "polls"
	}
	out := fmt.Sprintf("%s %s %s %s", s.ID, s.Shape, proto, svc)
	if s.Env != "" {
		out += " env=" + s.Env
	}
	if s.Picky {
		out += " picky"
	}
	return out + s.globString()
}

// held is one resource a client holds.
type held struct {
	name, env string // env: the variant's constraint (TP2), "" for none
	hash      string
	version   string // Delta: the resource's version
	refs      map[string][]string
	gen       int // the stream generation it came on (see Client.gen)
}

// ctype is a client's state of one type.
type ctype struct {
	wildcard bool
	names    map[string]bool // subscribed names (plain; TP2 clients as locators)
	globs    map[string]bool // subscribed glob collections (plain names)
	held     map[string]*held
	acked    string // SotW: the version_info of the last response accepted
	nonce    string // the last nonce received
	// asked: a request since the last response re-subscribed; a response
	// repeating what the client holds is then no duplicate.
	asked bool
	// sent: a request of the type went out on the current stream.
	sent bool
	// nacked (SotW): the last response was NACKed. The next may bring back
	// the version the client still runs: a correction the server may have
	// sent before it read the NACK (a guarded rollout halted by another
	// canary's NACK reverts every canary), not a duplicate.
	nacked bool
	// kept (Delta): keys whose newer version the client rejected, keeping
	// the one it holds. The server cannot tell which resources of a NACKed
	// response were rejected: sending the held version again is its
	// correction, not a duplicate.
	kept map[string]bool
	// resub (Delta): keys subscribed again after the client unsubscribed
	// them. The server must answer the new subscription with the resource,
	// and cannot know whether a response it sent before it read the request
	// (carrying the same version) reached the client after it: one
	// response repeating the held version is then that answer, no duplicate.
	resub map[string]bool
	// since: the relay's windows (see window) when the first request of
	// the type on the current stream was built, just before it went out:
	// every response on it is built from a state at least as new as the
	// low it had then.
	since map[string]window
}

// Client is a simulated xDS client of the relay.
type Client struct {
	spec ClientSpec
	run  *Run

	mu      sync.Mutex
	target  int // the relay it talks to
	conn    *grpc.ClientConn
	streams map[string]*cstream // "" for ADS, else by type
	types   map[string]*ctype
	gen     int           // stream generation: responses of older streams are dropped
	paused  time.Duration // a slow reader: pause before each read
	closed  bool
	wg      sync.WaitGroup
	// history is what the client received and sent lately, for failures.
	history []string
}

// note records an event in the client's history. Called with mu held.
func (c *Client) note(format string, args ...any) {
	if len(c.history) == 24 {
		c.history = c.history[1:]
	}
	c.history = append(c.history, fmt.Sprintf(format, args...))
	if c.run.log.Core().Enabled(zap.DebugLevel) {
		c.run.trace("%s (relay %s) %s", c.spec.ID, c.run.instance(c.target), c.history[len(c.history)-1])
	}
}

// fail fails the run with the client's history. Called with mu held.
func (c *Client) fail(format string, args ...any) {
	c.run.fail("%s: %s\n    history of %s:\n      %s", c.spec.ID, fmt.Sprintf(format, args...), c.spec.ID,
		strings.Join(c.history, "\n      "))
}

// cstream is one client stream (SotW or Delta).
type cstream struct {
	gen    int
	cancel context.CancelFunc
	sotw   sotwStream
	delta  deltaStream
	send   sync.Mutex
	// first: no request of the stream went out yet (the node goes on it).
	first bool
}

func newClient(r *Run, spec ClientSpec) *Client {
	c := &Client{spec: spec, run: r, types: map[string]*ctype{}}
	for _, t := range worldTypes {
		c.types[t] = &ctype{names: map[string]bool{}, held: map[string]*held{}}
	}
	switch spec.Shape {
	case Envoy:
		c.types[keying.ListenerType].wildcard = true
		c.types[keying.ClusterType].wildcard = true
	case GRPC:
		c.types[keying.ListenerType].names[r.listenerFor(spec.ID)] = true
	}
	if spec.Glob {
		c.types[keying.ClusterType].globs = map[string]bool{globName: true}
	}
	return c
}

func (c *Client) node() *corev3.Node {
	return &corev3.Node{Id: c.spec.ID, Cluster: "blue",
		ClientFeatures: []string{"xds.config.supports-resource-ttl", "xds.config.supports-resource-in-sotw"}}
}

// connect opens the client's streams to relay target and sends what it
// subscribes to, with what it holds (a reconnecting client: version_info,
// initial_resource_versions).
func (c *Client) connect(target int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked()
	if c.closed {
		return
	}
	c.target = target
	c.note("connect to relay %d (%s)", target, c.run.instance(target))
	conn, err := grpc.NewClient(c.run.relayAddr(target), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.run.fail("client %s: dial: %v", c.spec.ID, err)
		return
	}
	c.conn = conn
	c.gen++
	c.streams = map[string]*cstream{}
	keys := []string{""}
	if c.spec.PerType {
		keys = worldTypes
	}
	failed := false
	for _, k := range keys {
		ctx, cancel := context.WithCancel(context.Background())
		s := &cstream{gen: c.gen, cancel: cancel, first: true}
		switch {
		case c.spec.REST:
			s.sotw = openREST(ctx, c.run.restAddr(target), k)
		case c.spec.Delta:
			s.delta, err = openDelta(ctx, conn, k)
		default:
			s.sotw, err = openSotW(ctx, conn, k)
		}
		if err != nil {
			cancel()
			failed = true
			continue
		}
		c.streams[k] = s
		c.wg.Add(1)
		go c.recvLoop(s, k)
	}
	if failed {
		// The relay is down (restarting): try again, as clients do.
		c.note("connect to relay %d failed", target)
		c.retryLocked(target)
		return
	}
	c.requestAllLocked()
}

// requestAllLocked sends the first request of every type the client
// subscribes to on its new streams, at once, as Envoy and gRPC do: the relay
// gives a type not asked for yet a short grace. What the oracle books for
// each request (seconds for 10,000 names on a loaded machine) is done before
// the first goes out. Called with mu held.
func (c *Client) requestAllLocked() {
	var sends []func()
	for _, t := range worldTypes {
		ct := c.types[t]
		ct.sent, ct.nonce, ct.asked = false, "", true
		if ct.wildcard || len(ct.names) > 0 || len(ct.globs) > 0 {
			sends = append(sends, c.buildLocked(t, nil, nil))
		}
	}
	for _, send := range sends {
		send()
	}
}

// retryLocked reconnects to target after a backoff unless the client moved
// or closed meanwhile. Called with mu held.
func (c *Client) retryLocked(target int) {
	gen := c.gen
	go func() {
		time.Sleep(30 * time.Millisecond) // backoff before reconnecting
		c.mu.Lock()
		same := c.gen == gen && !c.closed
		c.mu.Unlock()
		if same {
			c.connect(target)
		}
	}()
}

// dropLocked closes the client's streams. Called with mu held.
func (c *Client) dropLocked() {
	c.run.watches.drop(c)
	for _, s := range c.streams {
		s.cancel()
	}
	c.streams = nil
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// close ends the client and waits for its goroutines.
func (c *Client) close() {
	c.mu.Lock()
	c.closed = true
	c.dropLocked()
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *Client) setPause(d time.Duration) {
	c.mu.Lock()
	c.paused = d
	c.mu.Unlock()
}

// streamFor returns the stream that carries typeURL. Called with mu held.
func (c *Client) streamFor(typeURL string) *cstream {
	if c.spec.PerType {
		return c.streams[typeURL]
	}
	return c.streams[""]
}

// recvLoop reads a stream's responses until it ends; a stream that fails
// while the client lives is reopened (to the same relay) after a pause.
func (c *Client) recvLoop(s *cstream, key string) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		pause := c.paused
		c.mu.Unlock()
		if pause > 0 {
			time.Sleep(pause) // a slow reader, not a synchronisation
		}
		var err error
		if s.delta != nil {
			var resp *discoverypb.DeltaDiscoveryResponse
			if resp, err = s.delta.Recv(); err == nil {
				c.onDelta(s, resp)
			}
		} else {
			var resp *discoverypb.DiscoveryResponse
			if resp, err = s.sotw.Recv(); err == nil {
				c.onSotW(s, resp)
			}
		}
		if err != nil {
			c.mu.Lock()
			if !c.closed && c.gen == s.gen {
				c.run.watches.drop(c) // the relay sees its watches end
				c.note("stream ended: %v", err)
				c.retryLocked(c.target)
			}
			c.mu.Unlock()
			return
		}
	}
}

// requestLocked sends typeURL's current subscription (SotW: with the last
// accepted version and nonce, ACK or NACK; Delta: the change sub/unsub, or
// an ACK/NACK of nonce). Called with mu held.
func (c *Client) requestLocked(typeURL string, sub, unsub []string, nack ...string) {
	c.buildLocked(typeURL, sub, unsub, nack...)()
}

// buildLocked books and builds the request requestLocked sends and returns
// what sends it. Called with mu held, and so is what it returns.
func (c *Client) buildLocked(typeURL string, sub, unsub []string, nack ...string) (send func()) {
	s := c.streamFor(typeURL)
	if s == nil {
		return func() {}
	}
	ct := c.types[typeURL]
	if !ct.sent {
		ct.since = c.run.windows(c.run.instance(c.target), typeURL)
	}
	if !c.spec.REST { // (a REST poll watches only while it lasts)
		c.run.watches.set(c, c.run.instance(c.target), typeURL, slices.Collect(maps.Keys(ct.names)), ct.wildcard)
	}
	var node *corev3.Node
	if s.first {
		node, s.first = c.node(), false
	}
	var detail *statuspb.Status
	if len(nack) > 0 {
		detail = &statuspb.Status{Code: 3, Message: nack[0]}
	}
	if s.sotw != nil {
		req := &discoverypb.DiscoveryRequest{Node: node, TypeUrl: typeURL, VersionInfo: ct.acked, ResponseNonce: ct.nonce, ErrorDetail: detail}
		if ct.wildcard && (ct.sent || len(ct.names)+len(ct.globs) > 0 || !keying.WildcardCapable(typeURL)) {
			req.ResourceNames = append(req.ResourceNames, keying.Wildcard)
		}
		req.ResourceNames = append(req.ResourceNames, slices.Sorted(maps.Keys(ct.globs))...)
		for _, n := range slices.Sorted(maps.Keys(ct.names)) {
			if c.tp2(typeURL) {
				req.ResourceLocators = append(req.ResourceLocators, &discoverypb.ResourceLocator{Name: n,
					DynamicParameters: map[string]string{envParam: c.spec.Env}})
				continue
			}
			req.ResourceNames = append(req.ResourceNames, n)
		}
		ct.sent = true
		c.note("-> %s v=%s n=%s names=%v locators=%d nack=%v", keying.ShortType(typeURL), req.VersionInfo, req.ResponseNonce,
			req.ResourceNames, len(req.ResourceLocators), detail != nil)
		return func() { s.sendLocked(func() error { return s.sotw.Send(req) }) }
	}
	req := &discoverypb.DeltaDiscoveryRequest{Node: node, TypeUrl: typeURL, ResponseNonce: ct.nonce, ErrorDetail: detail}
	if !ct.sent {
		// A (re)connecting client says what it holds and all it wants: a
		// TP2 client names the variant its locator selects by its name.
		req.InitialResourceVersions = map[string]string{}
		for _, h := range ct.held {
			req.InitialResourceVersions[h.name] = h.version
		}
		sub = slices.Sorted(maps.Keys(ct.names))
		sub = append(sub, slices.Sorted(maps.Keys(ct.globs))...)
		if ct.wildcard {
			sub = append(sub, keying.Wildcard)
		}
		unsub = nil
		req.ResponseNonce = ""
	}
	for _, n := range sub {
		if c.tp2(typeURL) && n != keying.Wildcard && !ct.globs[n] {
			req.ResourceLocatorsSubscribe = append(req.ResourceLocatorsSubscribe, &discoverypb.ResourceLocator{Name: n,
				DynamicParameters: map[string]string{envParam: c.spec.Env}})
			continue
		}
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
	}
	for _, n := range unsub {
		if c.tp2(typeURL) {
			req.ResourceLocatorsUnsubscribe = append(req.ResourceLocatorsUnsubscribe, &discoverypb.ResourceLocator{Name: n,
				DynamicParameters: map[string]string{envParam: c.spec.Env}})
			continue
		}
		req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
	}
	ct.sent = true
	c.note("-> %s n=%s sub=%v unsub=%v initial=%d nack=%v", keying.ShortType(typeURL), req.ResponseNonce,
		append(req.ResourceNamesSubscribe, locNames(req.ResourceLocatorsSubscribe)...),
		append(req.ResourceNamesUnsubscribe, locNames(req.ResourceLocatorsUnsubscribe)...), len(req.InitialResourceVersions), detail != nil)
	return func() { s.sendLocked(func() error { return s.delta.Send(req) }) }
}

// sendLocked sends a request on the stream with send. Called with the
// client's mu held.
func (s *cstream) sendLocked(send func() error) {
	s.send.Lock()
	defer s.send.Unlock()
	_ = send()
}

func locNames(ls []*discoverypb.ResourceLocator) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.GetName() + "{}"
	}
	return out
}

// tp2 reports whether the client subscribes to typeURL with locators.
func (c *Client) tp2(typeURL string) bool {
	return c.spec.Env != "" && (typeURL == keying.ClusterType || typeURL == keying.EndpointType)
}

// key is the client's key of a resource it receives.
func (c *Client) key(typeURL, name string) string {
	if c.tp2(typeURL) {
		return keying.SubscriptionKey(name, keying.CanonicalParams(map[string]string{envParam: c.spec.Env}))
	}
	return name
}

// item is one resource of a response as the client reads it.
type item struct {
	name, env, hash, version string
	bad                      bool
	beat                     bool // a TTL heartbeat (no resource)
}

// decodeAny reads one resource of a SotW response: a plain resource or a
// Resource wrapper (TP2 name and constraints, do_not_cache).
func decodeAny(typeURL string, a []byte, anyType string) (item, error) {
	if anyType == keying.ResourceWrapperType {
		w := &discoverypb.Resource{}
		if err := proto.Unmarshal(a, w); err != nil {
			return item{}, err
		}
		return fromWrapper(w), nil
	}
	return itemOf(fieldOne(a), "", a), nil
}

func fromWrapper(w *discoverypb.Resource) item {
	name := w.GetName()
	env := ""
	if rn := w.GetResourceName(); rn != nil {
		name = rn.GetName()
		env = rn.GetDynamicParameterConstraints().GetConstraint().GetValue()
	}
	if w.GetResource() == nil {
		return item{name: name, env: env, version: w.GetVersion(), beat: true}
	}
	it := itemOf(name, env, w.GetResource().GetValue())
	it.version = w.GetVersion()
	return it
}

func itemOf(name, env string, body []byte) item {
	return item{name: name, env: env, hash: bodyHash(body), bad: isBad(body)}
}

// fieldOne reads field 1 (the name) of a serialized resource.
func fieldOne(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeString(b)
			return v
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return ""
}

// sotwStream and deltaStream are what a client needs of an ADS or per-type
// stream.
type sotwStream interface {
	Send(*discoverypb.DiscoveryRequest) error
	Recv() (*discoverypb.DiscoveryResponse, error)
}

type deltaStream interface {
	Send(*discoverypb.DeltaDiscoveryRequest) error
	Recv() (*discoverypb.DeltaDiscoveryResponse, error)
}

// openSotW opens the ADS stream (typeURL "") or typeURL's per-type stream.
func openSotW(ctx context.Context, conn *grpc.ClientConn, typeURL string) (sotwStream, error) {
	switch typeURL {
	case keying.ListenerType:
		return listenersvc.NewListenerDiscoveryServiceClient(conn).StreamListeners(ctx)
	case keying.RouteType:
		return routesvc.NewRouteDiscoveryServiceClient(conn).StreamRoutes(ctx)
	case keying.ClusterType:
		return clustersvc.NewClusterDiscoveryServiceClient(conn).StreamClusters(ctx)
	case keying.EndpointType:
		return endpointsvc.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints(ctx)
	}
	return discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
}

// openDelta opens the Delta ADS stream (typeURL "") or typeURL's per-type one.
func openDelta(ctx context.Context, conn *grpc.ClientConn, typeURL string) (deltaStream, error) {
	switch typeURL {
	case keying.ListenerType:
		return listenersvc.NewListenerDiscoveryServiceClient(conn).DeltaListeners(ctx)
	case keying.RouteType:
		return routesvc.NewRouteDiscoveryServiceClient(conn).DeltaRoutes(ctx)
	case keying.ClusterType:
		return clustersvc.NewClusterDiscoveryServiceClient(conn).DeltaClusters(ctx)
	case keying.EndpointType:
		return endpointsvc.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints(ctx)
	}
	return discoverypb.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
}
