package oracle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/keying"
)

// Upstream is the simulation's authoritative control plane: an ADS server
// (SotW and Delta) serving the World's latest snapshot. It follows the xDS
// rules a careful server follows — stale SotW nonces ignored, full state for
// LDS/CDS, Delta removals of what a stream holds, TP2 locators answered with
// the selected variant wrapped with its constraints, do_not_cache marked —
// pushes each snapshot type by type (in xDS order when ordered, else in a
// random order), and records, per relay scope (a stream's node id), the
// window of snapshot indexes the relay's state of each type is in (window).
type Upstream struct {
	world     *World
	ordered   bool
	forgetful bool // see Options.Forgetful

	mu      sync.Mutex
	addr    string
	srv     *grpc.Server
	done    chan struct{}
	rng     *rand.Rand
	streams map[*ustream]struct{}
	sent    map[streamScope]map[string]*window // a relay scope's streams of one authority → type → what they told it
	told    map[string]map[string]toldTimes    // relay instance → "type name" → when acknowledged
	faults                                     // silences and invalid responses (Dims)
	gcp     *gcpServer                         // go-control-plane serves instead (Dims.GCP)
}

// streamScope names a relay scope's streams of one authority: node is the
// scope's node id, auth the authority whose names they subscribe ("" the
// default servers'). The relay keeps one stream per authority, and one of
// an authority without servers of its own comes to the default servers;
// each applies (or NACKs) its own responses, so each has its own window.
type streamScope struct{ node, auth string }

// window is what a relay scope's streams told it of one type: low is the
// snapshot index of the latest response it acknowledged (it applied it:
// it knows at least that much), high the latest queued (it may know that
// much at most; a response still on its way is not applied yet — the
// replica is behind, found with seed 3401325).
// first is the index of the first response queued (its state is the
// oldest the relay may have applied from these streams).
type window struct {
	first, low, high int
	auth             string // the authority of the streams (streamScope)
}

// carries reports whether the streams of w may have brought name: the
// default servers list other authorities' names too.
func (w window) carries(name string) bool {
	auth, _ := keying.Authority(name)
	return w.auth == "" || w.auth == auth
}

func newUpstream(w *World, ordered, forgetful bool, seed uint64) *Upstream {
	return &Upstream{world: w, ordered: ordered, forgetful: forgetful, rng: rand.New(rand.NewPCG(seed, 3)),
		streams: map[*ustream]struct{}{}, sent: map[streamScope]map[string]*window{}, told: map[string]map[string]toldTimes{}}
}

// start serves on addr (port 0 the first time, the same address on a
// restart).
func (u *Upstream) start(addr string) error {
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lis, err = net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("oracle: upstream listen: %w", err)
	}
	srv := grpc.NewServer()
	if u.gcp != nil {
		u.gcp.register(srv, u)
	} else {
		discoverypb.RegisterAggregatedDiscoveryServiceServer(srv, adsServer{u})
	}
	done := make(chan struct{})
	u.mu.Lock()
	u.addr, u.srv, u.done = lis.Addr().String(), srv, done
	u.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return nil
}

// stop ends every stream and releases the port.
func (u *Upstream) stop() {
	u.mu.Lock()
	srv, done := u.srv, u.done
	u.srv = nil
	u.mu.Unlock()
	if srv != nil {
		srv.Stop()
		<-done
	}
	if u.gcp != nil {
		u.gcp.stop()
	}
}

func (u *Upstream) running() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.srv != nil
}

// Windows returns the windows of relay instance's scopes for typeURL by
// node id and authority (see window).
func (u *Upstream) Windows(instance, typeURL string) map[string]window {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]window{}
	for sc, types := range u.sent {
		if w := types[typeURL]; w != nil && instanceOf(sc.node) == instance {
			out[sc.node+" "+sc.auth] = *w
		}
	}
	return out
}

// publish pushes the World's latest snapshot to every stream.
func (u *Upstream) publish() {
	if u.gcp != nil {
		u.gcp.set(u.world.Current())
		return
	}
	u.mu.Lock()
	streams := make([]*ustream, 0, len(u.streams))
	for s := range u.streams {
		streams = append(streams, s)
	}
	order := slices.Clone(worldTypes)
	if !u.ordered {
		u.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	u.mu.Unlock()
	snap := u.world.Current()
	for _, s := range streams {
		for _, t := range order {
			s.push(snap, t, false)
		}
	}
}

// adsServer serves the Upstream's ADS streams.
type adsServer struct{ u *Upstream }

func (a adsServer) StreamAggregatedResources(ss discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s := a.u.open(false, func(m proto.Message) error { return ss.Send(m.(*discoverypb.DiscoveryResponse)) })
	defer a.u.close(s)
	go s.sender(ss.Context())
	for {
		req, err := ss.Recv()
		if err != nil {
			return nil
		}
		s.onSotW(req)
	}
}

func (a adsServer) DeltaAggregatedResources(ss discoverypb.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	s := a.u.open(true, func(m proto.Message) error { return ss.Send(m.(*discoverypb.DeltaDiscoveryResponse)) })
	defer a.u.close(s)
	go s.sender(ss.Context())
	for {
		req, err := ss.Recv()
		if err != nil {
			return nil
		}
		s.onDelta(req)
	}
}

func (u *Upstream) open(delta bool, send func(proto.Message) error) *ustream {
	s := &ustream{u: u, delta: delta, send: send, types: map[string]*usub{}, wake: make(chan struct{}, 1)}
	u.mu.Lock()
	u.streams[s] = struct{}{}
	u.mu.Unlock()
	return s
}

func (u *Upstream) close(s *ustream) {
	u.mu.Lock()
	delete(u.streams, s)
	u.mu.Unlock()
}

// instanceOf is the relay instance a stream's node id names ("A1", or
// "A1/cluster=blue" for a node group); "" for a client's own node.
func instanceOf(node string) string {
	inst, _, _ := strings.Cut(node, "/")
	if !strings.HasPrefix(inst, "relay-") {
		return ""
	}
	return inst
}
