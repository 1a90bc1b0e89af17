package gateway

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/xds-relay/xds-relay/downstream"
)

// group is what SotW and Delta groups share: the key, the upstream runner's
// context and state, the streams it serves (S) and the linger after the last
// one left. Embedded by sotwGroup and deltaGroup.
type group[S comparable] struct {
	// set at creation, read-only
	s      *Server
	key    groupKey
	name   string // key.String(): the group's map key
	proto  string // protoSotW or protoDelta
	ctx    context.Context
	cancel context.CancelFunc
	log    *zap.Logger

	mu        sync.Mutex
	streams   map[S]struct{} // guarded by mu
	linger    *time.Timer    // guarded by mu: set while no stream is left
	server    string         // guarded by mu: the upstream server of the current stream
	connected bool           // guarded by mu: the upstream stream answered
}

// init sets a new group up. Called with Server.mu held.
func (g *group[S]) init(s *Server, k groupKey, proto string) {
	g.s, g.key, g.name, g.proto = s, k, k.String(), proto
	g.ctx, g.cancel = context.WithCancel(s.ctx)
	g.log = s.log.With(zap.String("group", g.name), zap.String("protocol", proto))
	g.streams = make(map[S]struct{})
	s.m.GatewayGroups.WithLabelValues(proto).Inc()
}

// start runs the group's upstream stream until the group ends. Called with
// Server.mu held, while the server is open (Close waits for it).
func (g *group[S]) start(run session) {
	g.s.wg.Go(func() { g.s.runUpstream(g.ctx, g.log, run, g.setState) })
}

// add joins st to the group and cancels a pending linger.
func (g *group[S]) add(st S) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.streams[st] = struct{}{}
	g.stopLingerLocked()
}

// leave removes st; once no stream is left, the group ends after the linger
// unless a stream joins meanwhile. remove takes the group out of the
// server's map if it is still there (called with Server.mu held).
func (g *group[S]) leave(st S, remove func() bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.streams, st)
	if len(g.streams) == 0 && g.linger == nil {
		g.linger = time.AfterFunc(g.s.opts.Linger, func() { g.expire(remove) })
	}
}

func (g *group[S]) expire(remove func() bool) {
	s := g.s
	s.mu.Lock()
	g.mu.Lock()
	idle := len(g.streams) == 0 && remove()
	if idle {
		g.linger = nil
		s.m.GatewayGroups.WithLabelValues(g.proto).Dec()
	}
	g.mu.Unlock()
	s.mu.Unlock()
	if idle {
		g.cancel()
	}
}

// each returns the group's streams, for waking them outside the lock.
func (g *group[S]) each() []S {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]S, 0, len(g.streams))
	for st := range g.streams {
		out = append(out, st)
	}
	return out
}

func (g *group[S]) stopLinger() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopLingerLocked()
}

func (g *group[S]) stopLingerLocked() {
	if g.linger != nil {
		g.linger.Stop()
		g.linger = nil
	}
}

// setState records the upstream stream's state (the runner's callback).
func (g *group[S]) setState(server string, connected bool) {
	g.mu.Lock()
	was := g.connected
	g.server, g.connected = server, connected
	g.mu.Unlock()
	if was != connected {
		d := 1.0
		if !connected {
			d = -1
		}
		g.s.m.GatewayUpstreamConnected.WithLabelValues(g.proto).Add(d)
	}
}

// recv receives the next upstream response as the upstream's bytes; the
// first one marks the group connected to server.
func (g *group[S]) recv(cs grpc.ClientStream, server string, answered *bool) ([]byte, error) {
	m := new(raw)
	if err := cs.RecvMsg(m); err != nil {
		return nil, err
	}
	if !*answered {
		*answered = true
		g.setState(server, true)
	}
	return rawBytes(m), nil
}

// admit checks what every data plane request must satisfy: the stream's
// identity (checked under mu, which guards it) and well-formed type URLs.
func (s *Server) admit(mu *sync.Mutex, id *identity, nodeID, cluster string, types []string) error {
	mu.Lock()
	err := id.check(nodeID, cluster)
	mu.Unlock()
	if err != nil {
		s.m.RejectedRequests.WithLabelValues("node").Inc()
		return err
	}
	if err := checkTypes(types); err != nil {
		s.m.RejectedRequests.WithLabelValues("invalid_type_url").Inc()
		return err
	}
	return nil
}

// serveStream runs a data plane stream on its handler goroutine: it lists
// it for /debug/clients, feeds its requests to handle and, after each request
// and each wake-up, calls flush to send what is due; leave runs at the end.
func serveStream[Req any](s *Server, ss grpc.ServerStream, id uint64, d debugStream, proto string, wake <-chan struct{},
	handle func(*Req) error, flush func() error, leave func()) error {
	s.register(id, d, proto)
	defer s.unregister(id, proto)
	defer leave()
	reqs, errc := pump(ss, func() *Req { return new(Req) })
	for {
		select {
		case req := <-reqs:
			if err := handle(req); err != nil {
				return err
			}
		case err := <-errc:
			return downstream.RecvErr(err)
		case <-wake:
		}
		if err := flush(); err != nil {
			return err
		}
	}
}

// peerOf is a stream's peer address ("" when unknown).
func peerOf(ss grpc.ServerStream) string {
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
