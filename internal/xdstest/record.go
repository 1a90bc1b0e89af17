package xdstest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Request is one request an Upstream received, exactly as the client sent it.
type Request struct {
	// Seq is the request's index in Upstream.Requests.
	Seq int
	// StreamID identifies the stream (counted from 1 per Upstream, shared by
	// SotW and Delta streams and surviving Restart).
	StreamID int64
	// Method is the full gRPC method, e.g.
	// "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources".
	Method string
	// Node is the stream's node: the last node the stream carried so far
	// (xDS: only the first request is guaranteed to carry it). The request's
	// own node, possibly nil, is in SotW.Node / Delta.Node.
	Node *core.Node
	// Exactly one of SotW and Delta is set. Treat them as read-only.
	SotW  *discoverygrpc.DiscoveryRequest
	Delta *discoverygrpc.DeltaDiscoveryRequest
	// Header is the stream's request metadata (e.g. "authorization").
	Header metadata.MD
}

// IsDelta reports whether r came on an incremental stream.
func (r Request) IsDelta() bool { return r.Delta != nil }

// IsADS reports whether r came on an aggregated (ADS) stream.
func (r Request) IsADS() bool {
	return strings.HasPrefix(r.Method, "/envoy.service.discovery.v3.AggregatedDiscoveryService/")
}

// TypeURL is the request's type_url as sent (per-type services may leave it
// empty).
func (r Request) TypeURL() string {
	if r.Delta != nil {
		return r.Delta.GetTypeUrl()
	}
	return r.SotW.GetTypeUrl()
}

// Names is the SotW resource_names or the Delta resource_names_subscribe.
func (r Request) Names() []string {
	if r.Delta != nil {
		return r.Delta.GetResourceNamesSubscribe()
	}
	return r.SotW.GetResourceNames()
}

// IsNACK reports whether r carries error_detail (xDS: that, not the version,
// marks a NACK).
func (r Request) IsNACK() bool {
	if r.Delta != nil {
		return r.Delta.GetErrorDetail() != nil
	}
	return r.SotW.GetErrorDetail() != nil
}

// Nonce is the request's response_nonce.
func (r Request) Nonce() string {
	if r.Delta != nil {
		return r.Delta.GetResponseNonce()
	}
	return r.SotW.GetResponseNonce()
}

// String is a one-line summary for failure messages.
func (r Request) String() string {
	kind := "sotw"
	if r.IsDelta() {
		kind = "delta"
	}
	s := fmt.Sprintf("#%d stream=%d %s node=%q type=%s names=%q nonce=%q", r.Seq, r.StreamID, kind,
		r.Node.GetId(), r.TypeURL(), r.Names(), r.Nonce())
	if r.Delta != nil {
		s += fmt.Sprintf(" unsubscribe=%q initial=%v", r.Delta.GetResourceNamesUnsubscribe(), r.Delta.GetInitialResourceVersions())
	} else {
		s += fmt.Sprintf(" version=%q", r.SotW.GetVersionInfo())
	}
	if r.IsNACK() {
		s += " NACK"
	}
	return s
}

// Response is one response an Upstream sent.
type Response struct {
	// Seq is the response's index in Upstream.Responses.
	Seq int
	// StreamID is the Request.StreamID of the stream it went to.
	StreamID int64
	// Exactly one of SotW and Delta is set. Treat them as read-only.
	SotW  *discoverygrpc.DiscoveryResponse
	Delta *discoverygrpc.DeltaDiscoveryResponse
}

// TypeURL is the response's type_url.
func (r Response) TypeURL() string {
	if r.Delta != nil {
		return r.Delta.GetTypeUrl()
	}
	return r.SotW.GetTypeUrl()
}

// Stats is a consistent view of an Upstream's recordings. Its slices must
// not be modified.
type Stats struct {
	Requests  []Request
	Responses []Response
	// OpenStreams counts the streams open now, TotalStreams every stream
	// ever opened (any service, SotW and Delta).
	OpenStreams, TotalStreams int
}

// Requests returns every request received so far, in order.
func (u *Upstream) Requests() []Request { return u.Stats().Requests }

// Responses returns every response sent so far, in order.
func (u *Upstream) Responses() []Response { return u.Stats().Responses }

// OpenStreams is the number of streams open now.
func (u *Upstream) OpenStreams() int { return u.Stats().OpenStreams }

// TotalStreams is the number of streams ever opened.
func (u *Upstream) TotalStreams() int { return u.Stats().TotalStreams }

// Stats returns the recordings so far.
func (u *Upstream) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	s, _ := u.statsLocked()
	return s
}

func (u *Upstream) statsLocked() (Stats, <-chan struct{}) {
	return Stats{
		Requests:     u.requests[:len(u.requests):len(u.requests)],
		Responses:    u.responses[:len(u.responses):len(u.responses)],
		OpenStreams:  u.open,
		TotalStreams: u.total,
	}, u.changed
}

// Wait blocks until cond holds for the recordings or ctx ends. cond is called
// once at first and again after every new recording, without locks held.
func (u *Upstream) Wait(ctx context.Context, cond func(Stats) bool) error {
	for {
		u.mu.Lock()
		s, changed := u.statsLocked()
		u.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("xdstest: upstream wait: %w", ctx.Err())
		case <-changed:
		}
	}
}

// MustWait is Wait with a WaitTimeout context; on timeout it fails the test,
// naming what and listing the requests received.
func (u *Upstream) MustWait(tb testing.TB, what string, cond func(Stats) bool) Stats {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	var last Stats
	err := u.Wait(ctx, func(s Stats) bool {
		last = s
		return cond(s)
	})
	if err != nil {
		tb.Fatalf("xdstest: upstream: timed out waiting for %s (%d open / %d total streams); requests:\n%s",
			what, last.OpenStreams, last.TotalStreams, formatRequests(last.Requests))
	}
	return last
}

// WaitRequest waits (WaitTimeout) for a request with Seq >= from that
// matches and returns the first such request. Pass len(u.Requests()) taken
// before an action as from to see only what the action caused.
func (u *Upstream) WaitRequest(tb testing.TB, from int, what string, match func(Request) bool) Request {
	tb.Helper()
	var found Request
	u.MustWait(tb, what, func(s Stats) bool {
		for _, r := range s.Requests[min(from, len(s.Requests)):] {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// NextRequest is WaitRequest from *cur, moving *cur past the request found:
// a test that reads the requests in order keeps one cursor.
func (u *Upstream) NextRequest(tb testing.TB, cur *int, what string, match func(Request) bool) Request {
	tb.Helper()
	r := u.WaitRequest(tb, *cur, what, match)
	*cur = r.Seq + 1
	return r
}

// NextSotW waits for the next SotW request of typeURL (see NextRequest).
func (u *Upstream) NextSotW(tb testing.TB, cur *int, typeURL string) *discoverygrpc.DiscoveryRequest {
	tb.Helper()
	return u.NextRequest(tb, cur, "SotW request for "+typeURL, func(r Request) bool {
		return r.SotW != nil && r.SotW.GetTypeUrl() == typeURL
	}).SotW
}

// NextDelta waits for the next Delta request of typeURL (see NextRequest).
func (u *Upstream) NextDelta(tb testing.TB, cur *int, typeURL string) *discoverygrpc.DeltaDiscoveryRequest {
	tb.Helper()
	return u.NextRequest(tb, cur, "Delta request for "+typeURL, func(r Request) bool {
		return r.Delta != nil && r.Delta.GetTypeUrl() == typeURL
	}).Delta
}

// WaitStreams waits (WaitTimeout) until open streams are open.
func (u *Upstream) WaitStreams(tb testing.TB, open int) {
	tb.Helper()
	u.MustWait(tb, fmt.Sprintf("%d open streams", open), func(s Stats) bool { return s.OpenStreams == open })
}

func formatRequests(reqs []Request) string {
	if len(reqs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, r := range reqs {
		b.WriteString("  ")
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// notifyLocked wakes every Wait. Call with u.mu held.
func (u *Upstream) notifyLocked() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// streamKey is the context key under which intercept stores the stream.
type streamKey struct{}

// recordingStream records every message received on a stream before the
// handler sees it.
type recordingStream struct {
	grpc.ServerStream
	ctx    context.Context
	u      *Upstream
	id     int64
	method string
	node   *core.Node // guarded by u.mu
}

func (s *recordingStream) Context() context.Context { return s.ctx }

func (s *recordingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(s.ctx)
	r := Request{StreamID: s.id, Method: s.method, Header: md}
	var node *core.Node
	switch m := m.(type) {
	case *discoverygrpc.DiscoveryRequest:
		r.SotW = proto.Clone(m).(*discoverygrpc.DiscoveryRequest)
		node = r.SotW.GetNode()
	case *discoverygrpc.DeltaDiscoveryRequest:
		r.Delta = proto.Clone(m).(*discoverygrpc.DeltaDiscoveryRequest)
		node = r.Delta.GetNode()
	default:
		return nil
	}
	u := s.u
	u.mu.Lock()
	defer u.mu.Unlock()
	if node != nil {
		s.node = node
	}
	r.Node = s.node
	r.Seq = len(u.requests)
	u.requests = append(u.requests, r)
	u.notifyLocked()
	return nil
}

// intercept wraps every stream in a recordingStream and counts streams.
func (u *Upstream) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s := &recordingStream{ServerStream: ss, u: u, method: info.FullMethod}
	s.ctx = context.WithValue(ss.Context(), streamKey{}, s)
	u.mu.Lock()
	u.nextStream++
	s.id = u.nextStream
	u.open++
	u.total++
	u.notifyLocked()
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.open--
		u.notifyLocked()
		u.mu.Unlock()
	}()
	return handler(srv, s)
}

// mapStream links go-control-plane's stream id to ours (from the stream
// context intercept made).
func (u *Upstream) mapStream(ctx context.Context, g gcpStream) {
	s, ok := ctx.Value(streamKey{}).(*recordingStream)
	if !ok {
		return
	}
	u.mu.Lock()
	u.gcpStreams[g] = s.id
	u.mu.Unlock()
}

func (u *Upstream) unmapStream(g gcpStream) {
	u.mu.Lock()
	delete(u.gcpStreams, g)
	u.mu.Unlock()
}

func (u *Upstream) recordResponse(g gcpStream, r Response) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r.StreamID = u.gcpStreams[g]
	r.Seq = len(u.responses)
	u.responses = append(u.responses, r)
	u.notifyLocked()
}
