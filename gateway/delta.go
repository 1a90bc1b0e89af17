package gateway

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// deltaGroup is the data planes of one group key on
// DeltaStreamConfiguration: one upstream Delta stream subscribing the union
// of their types, a per-resource cache, and every stream it serves.
type deltaGroup struct {
	group[*deltaStream]
	// set at creation, read-only
	nodeID  string // presented upstream
	cluster string
	kick    chan struct{} // one slot: wakes the upstream sender

	// guarded by group.mu
	types map[string]*deltaType // by type URL
	// upSubs are the types subscribed on the current upstream stream;
	// verdicts are the ACKs and NACKs its sender owes.
	upSubs   map[string]bool
	verdicts []*controlv1.DeltaDiscoveryRequest
}

// deltaType is one type's cache in a group. Guarded by deltaGroup.mu.
type deltaType struct {
	refs int                  // streams subscribing
	res  map[string]*resource // by name
	// known: the upstream has answered this type on its current stream.
	// Until then (a cold group, one seeded from the warm-restart file, or
	// one whose upstream stream ended) nothing is reported removed for lack
	// of it — the cache does not know, the upstream may still have it.
	known         bool
	systemVersion string
	seq           uint64            // increases with every change
	memo          map[string][]byte // encoded bodies of seq, by selection
	memoSeq       uint64
}

func (g *deltaGroup) typeOf(typeURL string) *deltaType {
	t := g.types[typeURL]
	if t == nil {
		t = &deltaType{res: make(map[string]*resource)}
		g.types[typeURL] = t
	}
	return t
}

// joinDelta adds st to the group of k, creating the group (seeded from the
// warm-restart cache) and its upstream stream.
func (s *Server) joinDelta(k groupKey, st *deltaStream) (*deltaGroup, error) {
	name := k.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "xds-relay: shutting down")
	}
	g := s.delta[name]
	if g == nil {
		g = &deltaGroup{kick: make(chan struct{}, 1), types: make(map[string]*deltaType)}
		g.init(s, k, protoDelta)
		g.nodeID, g.cluster = s.upstreamIdentity(k)
		for typeURL, w := range s.warm.delta[name] {
			t := g.typeOf(typeURL)
			t.systemVersion = w.systemVersion
			for _, r := range w.resources {
				t.res[r.name] = r
			}
		}
		delete(s.warm.delta, name)
		s.delta[name] = g
		g.start(g.session)
	}
	g.add(st)
	return g, nil
}

// leaveDelta removes st and its subscriptions from g.
func (s *Server) leaveDelta(g *deltaGroup, st *deltaStream, types []string) {
	g.mu.Lock()
	for _, t := range types {
		g.typeOf(t).refs--
	}
	g.mu.Unlock()
	g.leave(st, func() bool {
		if s.delta[g.name] != g {
			return false
		}
		delete(s.delta, g.name)
		return true
	})
}

// subscribe counts a stream's subscription to typeURL; the upstream stream
// subscribes a type the first time any stream does (and keeps it while the
// group lives).
func (g *deltaGroup) subscribe(typeURL string) {
	g.mu.Lock()
	g.typeOf(typeURL).refs++
	needed := !g.upSubs[typeURL]
	g.mu.Unlock()
	if needed {
		g.wakeSender()
	}
}

func (g *deltaGroup) unsubscribe(typeURL string) {
	g.mu.Lock()
	g.typeOf(typeURL).refs--
	g.mu.Unlock()
}

func (g *deltaGroup) wakeSender() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// session runs one upstream DeltaStreamConfiguration. Its sender
// subscribes the group's types (with initial_resource_versions of what the
// cache holds, so the control plane sends only what changed) and sends the
// verdicts; this goroutine receives, checks and applies responses.
func (g *deltaGroup) session(ctx context.Context, cc *grpc.ClientConn, server string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs, err := cc.NewStream(ctx, &controlv1.DeltaDiscoveryService_ServiceDesc.Streams[0],
		controlv1.DeltaDiscoveryService_DeltaStreamConfiguration_FullMethodName)
	if err != nil {
		cancel()
		return false, err
	}
	g.mu.Lock()
	g.upSubs, g.verdicts = make(map[string]bool), nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		g.unconfirm()
	}()
	wg.Go(func() {
		if err := g.sender(ctx, cs); err != nil {
			cancel() // the receive loop ends with the stream
		}
	})
	g.wakeSender()
	answered := false
	for {
		b, err := g.recv(cs, server, &answered)
		if err != nil {
			return answered, err
		}
		r, perr := parseDeltaResponse(b)
		if perr == nil && !g.subscribedUp(r.typeURL) {
			perr = fmt.Errorf("type %s was not subscribed", r.typeURL)
		}
		v := &controlv1.DeltaDiscoveryRequest{NodeId: g.nodeID, Cluster: g.cluster, ResponseNonce: r.nonce, TypeUrl: r.typeURL,
			ResultStatus: controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_ACK}
		if perr != nil {
			v.ResultStatus, v.ErrorDetail = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK, "xds-relay: "+perr.Error()
			g.s.m.GatewayUpstreamResponses.WithLabelValues(protoDelta, "nack").Inc()
			g.log.Warn("gateway Delta response rejected", zap.String("server", server), zap.Error(perr))
		} else {
			g.s.m.GatewayUpstreamResponses.WithLabelValues(protoDelta, "ack").Inc()
			g.apply(r)
		}
		g.mu.Lock()
		g.verdicts = append(g.verdicts, v)
		g.mu.Unlock()
		g.wakeSender()
	}
}

// unconfirm marks every type not known once the upstream stream ended: the
// cache is no longer the upstream's word, so nothing is reported removed
// until a new stream answers the type.
func (g *deltaGroup) unconfirm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.types {
		t.known = false
	}
}

func (g *deltaGroup) subscribedUp(typeURL string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.upSubs[typeURL]
}

// sender writes the upstream requests: the first (identity), subscriptions
// of types the group needs and the stream has not subscribed, and the
// verdicts, in that order.
func (g *deltaGroup) sender(ctx context.Context, cs grpc.ClientStream) error {
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.kick:
		}
		g.mu.Lock()
		var add []string
		for t, dt := range g.types {
			if dt.refs > 0 && !g.upSubs[t] {
				add = append(add, t)
				g.upSubs[t] = true
			}
		}
		var reqs []*controlv1.DeltaDiscoveryRequest
		if len(add) > 0 || first {
			slices.Sort(add)
			held := make(map[string]map[string]string)
			for _, t := range add {
				if res := g.types[t].res; len(res) > 0 {
					vs := make(map[string]string, len(res))
					for n, r := range res {
						vs[n] = r.version
					}
					held[t] = vs
				}
			}
			reqs = append(reqs, &controlv1.DeltaDiscoveryRequest{NodeId: g.nodeID, Cluster: g.cluster,
				SupportedFeatures: g.key.features, ResourceNamesSubscribe: add, InitialResourceVersions: encodeInitialVersions(held)})
			first = false
		}
		reqs = append(reqs, g.verdicts...)
		g.verdicts = nil
		g.mu.Unlock()
		for _, r := range reqs {
			if err := cs.SendMsg(r); err != nil {
				return err
			}
		}
	}
}

// apply applies an accepted response to the cache and offers the change to
// every stream. Only the upstream's own word removes a resource: a removal,
// or its absence from a non_incremental response.
func (g *deltaGroup) apply(r deltaResponse) {
	g.mu.Lock()
	t := g.typeOf(r.typeURL)
	var changed []string
	if r.nonIncremental {
		keep := make(map[string]bool, len(r.resources))
		for _, res := range r.resources {
			keep[res.name] = true
		}
		for n := range t.res {
			if !keep[n] {
				delete(t.res, n)
				changed = append(changed, n)
			}
		}
	}
	for _, res := range r.resources {
		if cur := t.res[res.name]; cur != nil && cur.version == res.version && bytes.Equal(cur.raw, res.raw) {
			continue
		}
		t.res[res.name] = &resource{name: res.name, version: res.version, raw: bytes.Clone(res.raw)}
		changed = append(changed, res.name)
	}
	for _, n := range r.removed {
		if _, ok := t.res[n]; ok {
			delete(t.res, n)
			changed = append(changed, n)
		}
	}
	becameKnown := !t.known
	t.known, t.systemVersion = true, r.systemVersion
	if len(changed) == 0 && !becameKnown {
		g.mu.Unlock()
		return
	}
	t.seq++
	g.mu.Unlock()
	for _, st := range g.each() {
		st.offer(r.typeURL, changed, becameKnown)
	}
	if g.s.persist != nil {
		g.s.persist.touch()
	}
}

// maxMemo bounds the encoded bodies kept per type and change.
const maxMemo = 256

// selection is what one stream is sent of one type from one change: the
// resources whose version it does not hold and the removals.
type selection struct {
	send    []*resource
	removed []string
	body    []byte
	version string
}

// selectFor computes the response of a stream for typeURL from the cache:
// among names (or, for full, every cached and held name), the resources the
// stream does not hold, and — once the upstream answered the type — those at
// a version it does not hold and the held names the upstream no longer has.
// answered says whether the stream was answered for the type before (an
// empty first answer tells it the type is known and empty). ok is false when there is nothing to send.
func (g *deltaGroup) selectFor(typeURL string, has map[string]string, names []string, full, answered bool) (selection, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.types[typeURL]
	if t == nil {
		return selection{}, false
	}
	if full {
		names = make([]string, 0, len(t.res)+len(has))
		for n := range t.res {
			names = append(names, n)
		}
		for n := range has {
			if _, cached := t.res[n]; !cached {
				names = append(names, n)
			}
		}
	}
	var sel selection
	for _, n := range names {
		v, held := has[n]
		if r := t.res[n]; r != nil {
			// No rollback: over a version the stream holds, only the
			// upstream's current word is sent (versions are hashes: the
			// cache's may be the older).
			if v != r.version && (!held || t.known) {
				sel.send = append(sel.send, r)
			}
		} else if held && t.known {
			sel.removed = append(sel.removed, n)
		}
	}
	if len(sel.send) == 0 && len(sel.removed) == 0 && (answered || !t.known) {
		return selection{}, false
	}
	slices.SortFunc(sel.send, func(a, b *resource) int { return strings.Compare(a.name, b.name) })
	slices.Sort(sel.removed)
	sel.removed = slices.Compact(sel.removed)
	sel.version = t.systemVersion
	// Streams in step with each other send the same change: encode it once.
	if t.memo == nil || t.memoSeq != t.seq || len(t.memo) > maxMemo {
		t.memo, t.memoSeq = make(map[string][]byte), t.seq
	}
	var kb bytes.Buffer
	for _, r := range sel.send {
		kb.WriteString(r.name)
		kb.WriteByte(0)
	}
	kb.WriteByte(1)
	for _, n := range sel.removed {
		kb.WriteString(n)
		kb.WriteByte(0)
	}
	key := kb.String()
	if sel.body = t.memo[key]; sel.body == nil {
		sel.body = encodeDeltaBody(t.systemVersion, typeURL, sel.send, sel.removed)
		t.memo[key] = sel.body
	}
	return sel, true
}
