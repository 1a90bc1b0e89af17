package xdstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionservice "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// ADSClient is a raw SotW client for protocol tests, on an ADS stream
// (DialADS) or a per-type service stream (DialSotW): it sends exactly the
// requests a test asks for and hands over responses one by one. Its own
// connection, one stream. Per type it remembers the last subscribed names,
// the last ACKed version and the last nonce received, as a real client does.
type ADSClient struct {
	// Set at creation, read-only.
	tb      testing.TB
	node    *core.Node
	typeURL string // "" for ADS; else the per-type service's type
	conn    *grpc.ClientConn
	stream  sotwStream
	cancel  context.CancelFunc
	recvCh  chan recvResult // filled by the receive goroutine
	done    chan struct{}   // closed when the receive goroutine returns

	// Guarded by mu.
	mu       sync.Mutex
	sentNode bool                                        // the node went out on the first request
	names    map[string][]string                         // type URL → last subscribed names
	locators map[string][]*discoverygrpc.ResourceLocator // type URL → last subscribed TP2 locators
	acked    map[string]string                           // type URL → last ACKed version
	nonces   map[string]string                           // type URL → last nonce received
	closed   bool
}

type recvResult struct {
	resp *discoverygrpc.DiscoveryResponse
	err  error
}

// sotwStream is what ADSClient needs of an ADS or per-type SotW stream.
type sotwStream interface {
	Send(*discoverygrpc.DiscoveryRequest) error
	Recv() (*discoverygrpc.DiscoveryResponse, error)
}

// perType opens the SotW stream of each per-type discovery service
// (VHDS has no SotW method).
var perType = map[string]func(context.Context, *grpc.ClientConn) (sotwStream, error){
	resource.ListenerType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return listenerservice.NewListenerDiscoveryServiceClient(c).StreamListeners(ctx)
	},
	resource.RouteType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return routeservice.NewRouteDiscoveryServiceClient(c).StreamRoutes(ctx)
	},
	resource.ScopedRouteType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return routeservice.NewScopedRoutesDiscoveryServiceClient(c).StreamScopedRoutes(ctx)
	},
	resource.ClusterType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return clusterservice.NewClusterDiscoveryServiceClient(c).StreamClusters(ctx)
	},
	resource.EndpointType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return endpointservice.NewEndpointDiscoveryServiceClient(c).StreamEndpoints(ctx)
	},
	resource.SecretType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return secretservice.NewSecretDiscoveryServiceClient(c).StreamSecrets(ctx)
	},
	resource.RuntimeType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return runtimeservice.NewRuntimeDiscoveryServiceClient(c).StreamRuntime(ctx)
	},
	resource.ExtensionConfigType: func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return extensionservice.NewExtensionConfigDiscoveryServiceClient(c).StreamExtensionConfigs(ctx)
	},
}

// DialADS opens an ADS SotW stream to addr (plaintext). The node goes on the
// first request only, as xDS allows. The client is closed when the test ends.
func DialADS(tb testing.TB, addr string, node *core.Node) *ADSClient {
	tb.Helper()
	return DialSotW(tb, addr, node, "")
}

// DialSotW opens the SotW stream of typeURL's per-type discovery service
// (StreamClusters for CDS, ...) or, with typeURL "", an ADS stream. On a
// per-type client a type URL of "" in Subscribe means typeURL (the request
// then carries no type_url, as per-type clients may send).
func DialSotW(tb testing.TB, addr string, node *core.Node, typeURL string) *ADSClient {
	tb.Helper()
	open := func(ctx context.Context, c *grpc.ClientConn) (sotwStream, error) {
		return discoverygrpc.NewAggregatedDiscoveryServiceClient(c).StreamAggregatedResources(ctx)
	}
	if typeURL != "" {
		var ok bool
		if open, ok = perType[typeURL]; !ok {
			tb.Fatalf("xdstest: no SotW per-type service for %q", typeURL)
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("xdstest: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := open(ctx, conn)
	if err != nil {
		cancel()
		_ = conn.Close()
		tb.Fatalf("xdstest: open SotW stream to %s: %v", addr, err)
	}
	c := &ADSClient{
		tb:       tb,
		node:     node,
		typeURL:  typeURL,
		conn:     conn,
		stream:   stream,
		cancel:   cancel,
		recvCh:   make(chan recvResult, 64),
		done:     make(chan struct{}),
		names:    map[string][]string{},
		locators: map[string][]*discoverygrpc.ResourceLocator{},
		acked:    map[string]string{},
		nonces:   map[string]string{},
	}
	go c.recvLoop(ctx)
	tb.Cleanup(c.Close)
	return c
}

func (c *ADSClient) recvLoop(ctx context.Context) {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		select {
		case c.recvCh <- recvResult{resp, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Close ends the stream and the connection and waits for the receive
// goroutine. Idempotent.
func (c *ADSClient) Close() {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if closed {
		return
	}
	c.cancel()
	<-c.done
	_ = c.conn.Close()
}

// SotWRequest builds a raw DiscoveryRequest (no node) for Send.
func SotWRequest(typeURL, version, nonce string, names ...string) *discoverygrpc.DiscoveryRequest {
	return &discoverygrpc.DiscoveryRequest{
		TypeUrl:       typeURL,
		VersionInfo:   version,
		ResponseNonce: nonce,
		ResourceNames: names,
	}
}

// Send sends req as is (the node too: Send does not add it).
func (c *ADSClient) Send(req *discoverygrpc.DiscoveryRequest) error {
	c.mu.Lock()
	if req.GetNode() != nil {
		c.sentNode = true
	}
	c.mu.Unlock()
	if err := c.stream.Send(req); err != nil {
		return fmt.Errorf("xdstest: ADS send: %w", err)
	}
	return nil
}

// MustSend sends req, with the client's node when it is the stream's first
// request and has none; a failed send fails the test.
func (c *ADSClient) MustSend(req *discoverygrpc.DiscoveryRequest) {
	c.tb.Helper()
	c.mu.Lock()
	if !c.sentNode && req.Node == nil {
		req.Node = c.node
	}
	c.sentNode = true
	c.mu.Unlock()
	c.mustSend(req)
}

// key is the type under which per-type state is kept: typeURL, or the
// per-type service's type for "".
func (c *ADSClient) key(typeURL string) string {
	if typeURL == "" {
		return c.typeURL
	}
	return typeURL
}

// requestLocked builds a request for typeURL; the node goes on the stream's
// first request. Call with c.mu held.
func (c *ADSClient) requestLocked(typeURL string) *discoverygrpc.DiscoveryRequest {
	k := c.key(typeURL)
	req := &discoverygrpc.DiscoveryRequest{
		TypeUrl:          typeURL,
		VersionInfo:      c.acked[k],
		ResponseNonce:    c.nonces[k],
		ResourceNames:    c.names[k],
		ResourceLocators: c.locators[k],
	}
	if !c.sentNode {
		req.Node = c.node
		c.sentNode = true
	}
	return req
}

// Resume subscribes names of typeURL as a client that reconnects holding
// version (from an earlier stream, to this relay or another) does: its
// request carries that version.
func (c *ADSClient) Resume(typeURL, version string, names ...string) {
	c.tb.Helper()
	c.mu.Lock()
	c.acked[c.key(typeURL)] = version
	c.mu.Unlock()
	c.Subscribe(typeURL, names...)
}

// Subscribe sets the subscribed names of typeURL (none: wildcard for LDS/CDS
// on a first request) and sends a request carrying the last ACKed version and
// the last nonce received for that type, as a real client does.
func (c *ADSClient) Subscribe(typeURL string, names ...string) {
	c.tb.Helper()
	c.mu.Lock()
	c.names[c.key(typeURL)] = names
	req := c.requestLocked(typeURL)
	c.mu.Unlock()
	c.mustSend(req)
}

// SubscribeLocators is Subscribe with xRFC TP2 resource locators: it sets
// the type's subscription to names and locs.
func (c *ADSClient) SubscribeLocators(typeURL string, names []string, locs ...*discoverygrpc.ResourceLocator) {
	c.tb.Helper()
	c.mu.Lock()
	c.names[c.key(typeURL)] = names
	c.locators[c.key(typeURL)] = locs
	req := c.requestLocked(typeURL)
	c.mu.Unlock()
	c.mustSend(req)
}

// Locator returns a TP2 resource locator of name with params given as
// alternating keys and values.
func Locator(name string, kv ...string) *discoverygrpc.ResourceLocator {
	l := &discoverygrpc.ResourceLocator{Name: name, DynamicParameters: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		l.DynamicParameters[kv[i]] = kv[i+1]
	}
	return l
}

// Ack ACKs resp: its version and nonce, the current names, no error_detail.
func (c *ADSClient) Ack(resp *discoverygrpc.DiscoveryResponse) {
	c.tb.Helper()
	c.mu.Lock()
	t := resp.GetTypeUrl()
	c.acked[c.key(t)] = resp.GetVersionInfo()
	req := c.requestLocked(t)
	req.ResponseNonce = resp.GetNonce()
	c.mu.Unlock()
	c.mustSend(req)
}

// Nack NACKs resp: the last ACKed version, resp's nonce and error_detail
// (INVALID_ARGUMENT, msg).
func (c *ADSClient) Nack(resp *discoverygrpc.DiscoveryResponse, msg string) {
	c.tb.Helper()
	c.mu.Lock()
	req := c.requestLocked(resp.GetTypeUrl())
	req.ResponseNonce = resp.GetNonce()
	req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: msg}
	c.mu.Unlock()
	c.mustSend(req)
}

func (c *ADSClient) mustSend(req *discoverygrpc.DiscoveryRequest) {
	c.tb.Helper()
	if err := c.stream.Send(req); err != nil {
		c.tb.Fatalf("xdstest: ADS send %s: %v", req.GetTypeUrl(), err)
	}
}

// Recv returns the next response, or an error when ctx ends first or the
// stream failed (the gRPC status error). It records the response's nonce.
func (c *ADSClient) Recv(ctx context.Context) (*discoverygrpc.DiscoveryResponse, error) {
	select {
	case r := <-c.recvCh:
		if r.err != nil {
			// Keep the stream error for later calls.
			c.recvCh <- r
			return nil, fmt.Errorf("xdstest: ADS recv: %w", r.err)
		}
		c.mu.Lock()
		c.nonces[c.key(r.resp.GetTypeUrl())] = r.resp.GetNonce()
		c.mu.Unlock()
		return r.resp, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("xdstest: ADS recv: %w", ctx.Err())
	}
}

// MustRecv is Recv with a WaitTimeout context; it fails the test on error.
func (c *ADSClient) MustRecv() *discoverygrpc.DiscoveryResponse {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	resp, err := c.Recv(ctx)
	if err != nil {
		c.tb.Fatalf("xdstest: no response within %v: %v", WaitTimeout, err)
	}
	return resp
}

// RecvType receives (WaitTimeout) until a response of typeURL arrives, failing
// the test on any other type.
func (c *ADSClient) RecvType(typeURL string) *discoverygrpc.DiscoveryResponse {
	c.tb.Helper()
	resp := c.MustRecv()
	if resp.GetTypeUrl() != typeURL {
		c.tb.Fatalf("xdstest: got a %s response, want %s: %v", resp.GetTypeUrl(), typeURL, protoText(resp))
	}
	return resp
}

// ExpectNoResponse fails the test if a response arrives within d (a short
// timeout proves a non-event). A stream error is also a failure.
func (c *ADSClient) ExpectNoResponse(d time.Duration) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.Recv(ctx)
	switch {
	case err == nil:
		c.tb.Fatalf("xdstest: unexpected response: %v", protoText(resp))
	case !errors.Is(err, context.DeadlineExceeded):
		c.tb.Fatalf("xdstest: expected no response: %v", err)
	}
}

// Err waits (WaitTimeout) for the stream to fail and returns its error;
// responses still queued are dropped. It fails the test if the stream stays
// open.
func (c *ADSClient) Err() error {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	for {
		select {
		case r := <-c.recvCh:
			if r.err != nil {
				c.recvCh <- r
				return r.err
			}
		case <-ctx.Done():
			c.tb.Fatalf("xdstest: ADS stream still open after %v", WaitTimeout)
			return nil
		}
	}
}

// protoText renders m compactly for failure messages.
func protoText(m proto.Message) string {
	return prototext.Format(m)
}
