package oracle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/rest"
)

// restPollTimeout is how long the relays hold a REST poll with nothing new
// (Dims.REST). A poll of a type that holds a do_not_cache resource is
// answered from its node's own scope, which is made for the poll and closed
// with it (relay/nocache.go): every such poll fetches the type upstream
// again, which in a large world takes longer than a short poll lasts, so
// that the poller could never be answered. Operators must likewise set
// rest.poll_timeout above their control plane's time to answer a type.
func restPollTimeout(d Dims) time.Duration {
	if d.Large {
		return 10 * time.Second
	}
	return 300 * time.Millisecond
}

// restStream is a REST-JSON poller of one type, seen by the Client as a
// SotW stream: Send records the request to poll with, Recv polls until the
// relay answers 200.
type restStream struct {
	ctx    context.Context
	url    string
	client *http.Client

	mu     sync.Mutex
	req    *discoverypb.DiscoveryRequest // the latest request; its node on every poll
	node   *corev3.Node
	cancel context.CancelFunc // the poll in flight
	wake   chan struct{}
}

func openREST(ctx context.Context, addr, typeURL string) *restStream {
	suffix := ""
	for s, t := range rest.Types {
		if t == typeURL {
			suffix = s
		}
	}
	return &restStream{ctx: ctx, url: "http://" + addr + "/v3/discovery:" + suffix, client: &http.Client{},
		wake: make(chan struct{}, 1)}
}

// Send makes req the request to poll with; a poll in flight with an older
// one is given up.
func (r *restStream) Send(req *discoverypb.DiscoveryRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.req = proto.Clone(req).(*discoverypb.DiscoveryRequest)
	if r.req.Node != nil {
		r.node = r.req.Node
	}
	if r.cancel != nil {
		r.cancel()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// Recv polls until the relay answers with something new.
func (r *restStream) Recv() (*discoverypb.DiscoveryResponse, error) {
	for {
		r.mu.Lock()
		req := r.req
		ctx, cancel := context.WithCancel(r.ctx)
		r.cancel = cancel
		if req != nil {
			req = proto.Clone(req).(*discoverypb.DiscoveryRequest)
			req.Node = r.node
		}
		r.mu.Unlock()
		if req == nil {
			cancel()
			select {
			case <-r.ctx.Done():
				return nil, r.ctx.Err()
			case <-r.wake:
				continue
			}
		}
		resp, err := r.poll(ctx, req)
		cancel()
		if resp != nil || r.ctx.Err() != nil {
			return resp, err
		}
		if err != nil && ctx.Err() == nil {
			return nil, err // the relay is away: the client reconnects
		}
	}
}

// poll posts req once: the response on 200, nil on 304 (nothing new within
// the poll timeout), an error otherwise.
func (r *restStream) poll(ctx context.Context, req *discoverypb.DiscoveryRequest) (*discoverypb.DiscoveryResponse, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := r.client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	switch {
	case err != nil:
		return nil, err
	case res.StatusCode == http.StatusNotModified:
		return nil, nil
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("rest: %s: %s", res.Status, bytes.TrimSpace(b))
	}
	resp := &discoverypb.DiscoveryResponse{}
	if err := protojson.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	for _, a := range resp.Resources {
		if err := canonical(a); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// canonical encodes a resource decoded from JSON again as the upstream did
// (deterministic), so that its content hash is the upstream's.
func canonical(a *anypb.Any) error {
	m, err := a.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("rest: %w", err)
	}
	if w, ok := m.(*discoverypb.Resource); ok && w.Resource != nil {
		if err := canonical(w.Resource); err != nil {
			return err
		}
	}
	a.Value, err = proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return err
}

// relisten listens on addr again (a restart takes the port it had), trying
// for a while if the port is still in use.
func relisten(addr string) (net.Listener, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lis, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return lis, err
		}
	}
}

// startREST serves REST-JSON polling of rl on slot's REST address
// (Dims.REST). Called with s.mu held.
func (r *Run) startREST(s *relaySlot, rl *relay.Relay) error {
	s.restDone = nil
	if !r.sched.Opts.Dims.REST {
		return nil
	}
	lis, err := relisten(s.restAddr)
	if err != nil {
		return fmt.Errorf("oracle: rest listen: %w", err)
	}
	s.restAddr = lis.Addr().String()
	s.restDone = make(chan error, 1)
	go func(done chan error) { done <- rl.ServeREST(lis) }(s.restDone)
	return nil
}

func (r *Run) restAddr(i int) string {
	s := r.relays[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restAddr
}
