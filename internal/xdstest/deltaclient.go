package xdstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// DeltaClient is a raw Delta ADS client for protocol tests: it sends exactly
// the requests a test asks for and hands over responses one by one.
type DeltaClient struct {
	tb     testing.TB
	node   *core.Node
	conn   *grpc.ClientConn
	stream discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel context.CancelFunc
	recvCh chan deltaResult
	done   chan struct{}
	sent   bool // the node went out (only touched by the test goroutine)
}

type deltaResult struct {
	resp *discoverygrpc.DeltaDiscoveryResponse
	err  error
}

// DialDelta opens a Delta ADS stream to addr (plaintext), closed when the
// test ends.
func DialDelta(tb testing.TB, addr string, node *core.Node) *DeltaClient {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("xdstest: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		tb.Fatalf("xdstest: open Delta stream to %s: %v", addr, err)
	}
	c := &DeltaClient{tb: tb, node: node, conn: conn, stream: stream, cancel: cancel,
		recvCh: make(chan deltaResult, 64), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			resp, err := stream.Recv()
			select {
			case c.recvCh <- deltaResult{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tb.Cleanup(c.Close)
	return c
}

// Close ends the stream and waits for the receive goroutine. Idempotent.
func (c *DeltaClient) Close() {
	c.cancel()
	<-c.done
	_ = c.conn.Close()
}

// Send sends req, adding the node to the stream's first request.
func (c *DeltaClient) Send(req *discoverygrpc.DeltaDiscoveryRequest) {
	c.tb.Helper()
	if !c.sent {
		req.Node = c.node
		c.sent = true
	}
	if err := c.stream.Send(req); err != nil {
		c.tb.Fatalf("xdstest: Delta send: %v", err)
	}
}

// Subscribe subscribes to and unsubscribes from names of typeURL.
func (c *DeltaClient) Subscribe(typeURL string, subscribe, unsubscribe []string) {
	c.tb.Helper()
	c.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: subscribe, ResourceNamesUnsubscribe: unsubscribe})
}

// Ack ACKs resp.
func (c *DeltaClient) Ack(resp *discoverygrpc.DeltaDiscoveryResponse) {
	c.tb.Helper()
	c.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

// Nack NACKs resp with msg.
func (c *DeltaClient) Nack(resp *discoverygrpc.DeltaDiscoveryResponse, msg string) {
	c.tb.Helper()
	c.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: msg}})
}

// MustRecv returns the next response (WaitTimeout), failing the test on error.
func (c *DeltaClient) MustRecv() *discoverygrpc.DeltaDiscoveryResponse {
	c.tb.Helper()
	t := time.NewTimer(WaitTimeout)
	defer t.Stop()
	select {
	case r := <-c.recvCh:
		if r.err != nil {
			c.recvCh <- r
			c.tb.Fatalf("xdstest: Delta recv: %v", r.err)
		}
		return r.resp
	case <-t.C:
		c.tb.Fatalf("xdstest: no Delta response within %v", WaitTimeout)
	}
	return nil
}

// TryRecv returns the next response if one arrives within d.
func (c *DeltaClient) TryRecv(d time.Duration) (*discoverygrpc.DeltaDiscoveryResponse, bool) {
	c.tb.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-c.recvCh:
		if r.err != nil {
			c.recvCh <- r
			return nil, false
		}
		return r.resp, true
	case <-t.C:
		return nil, false
	}
}

// ExpectNoResponse fails the test if a response or an error arrives within d.
func (c *DeltaClient) ExpectNoResponse(d time.Duration) {
	c.tb.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-c.recvCh:
		c.tb.Fatalf("xdstest: unexpected Delta response: %v", describeDelta(r))
	case <-t.C:
	}
}

func describeDelta(r deltaResult) string {
	if r.err != nil {
		return r.err.Error()
	}
	var names []string
	for _, res := range r.resp.GetResources() {
		names = append(names, res.GetName()+"@"+res.GetVersion())
	}
	return fmt.Sprintf("type %s resources %v removed %v", r.resp.GetTypeUrl(), names, r.resp.GetRemovedResources())
}

// DeltaHolds is what a Delta client holds of one type: name → version.
type DeltaHolds map[string]string

// Apply applies resp to h (see ApplyDelta) and returns the names resp both
// sent and removed.
func (h DeltaHolds) Apply(resp *discoverygrpc.DeltaDiscoveryResponse) (sentAndRemoved []string) {
	return ApplyDelta(h, resp.GetResources(), resp.GetRemovedResources())
}

// Has reports whether h holds name.
func (h DeltaHolds) Has(name string) bool {
	_, ok := h[name]
	return ok
}

// deltaResource is a resource of a Delta response.
type deltaResource interface {
	GetName() string
	GetVersion() string
}

// ApplyDelta applies one Delta response of xDS or of gateway.control.v1 to
// h: its resources are added or replaced at their versions, its
// removed_resources deleted. It returns the names the response both sent and
// removed (xDS forbids it: Envoy NACKs such a response).
func ApplyDelta[R deltaResource](h DeltaHolds, resources []R, removed []string) (sentAndRemoved []string) {
	sent := make(map[string]bool, len(resources))
	for _, r := range resources {
		h[r.GetName()] = r.GetVersion()
		sent[r.GetName()] = true
	}
	for _, n := range removed {
		if sent[n] {
			sentAndRemoved = append(sentAndRemoved, n)
		}
		delete(h, n)
	}
	return sentAndRemoved
}
