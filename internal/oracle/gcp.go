package oracle

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/server/config"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// gcpServer is go-control-plane v0.14 serving the World (Dims.GCP): its
// server over a SnapshotCache in ADS mode, every node on one snapshot whose
// version is the World's index ("i3"). The server's callbacks record the
// relay scopes' windows as the Upstream's own streams do.
type gcpServer struct {
	cache   *keptWatches
	ordered bool // sotw.WithOrderedADS: SotW responses in xDS order

	mu      sync.Mutex
	cancel  context.CancelFunc          // the running server's context
	streams map[gcpStreamID]*gcpPending // by stream: its relay scope and responses not acknowledged yet
}

// gcpStreamID names a go-control-plane stream: SotW and Delta number their
// streams apart.
type gcpStreamID struct {
	delta bool
	id    int64
}

// gcpPending is one stream's node id and, by type, its responses not
// acknowledged yet.
type gcpPending struct {
	node    string
	pending map[string][]pendingIndex
	names   map[string]map[string]bool // SotW: by type, the names the last request subscribed (nil: the wildcard)
}

// worldKey is the one snapshot key every node maps to.
const worldKey = "world"

type oneSnapshot struct{}

func (oneSnapshot) ID(*core.Node) string { return worldKey }

// useGCP makes u serve through go-control-plane.
func (u *Upstream) useGCP() {
	quiet := func(string, ...any) {}
	log := gcplog.LoggerFuncs{DebugFunc: quiet, InfoFunc: quiet, WarnFunc: quiet, ErrorFunc: quiet}
	inner := explicitWildcard{cache.NewSnapshotCache(true, oneSnapshot{}, log)}
	u.gcp = &gcpServer{cache: &keptWatches{explicitWildcard: inner, watches: map[*keptWatch]bool{}}, ordered: u.ordered,
		streams: map[gcpStreamID]*gcpPending{}}
}

// explicitWildcard passes a SotW wildcard subscription that also names
// resources on as a request without names: go-control-plane v0.14 answers
// an explicit "*" with nothing (it filters by the names, and in ADS mode
// leaves a request that does not list every resource unanswered), which no
// relay could work around (the relay's own tests patch it the same way).
type explicitWildcard struct{ cache.SnapshotCache }

func (w explicitWildcard) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	if sub.IsWildcard() && len(req.GetResourceNames()) > 0 {
		req = proto.Clone(req).(*discoverypb.DiscoveryRequest)
		req.ResourceNames = nil
	}
	return w.SnapshotCache.CreateWatch(req, sub, ch)
}

// keptWatches keeps open a named SotW watch that go-control-plane v0.14
// drops unanswered. In ADS mode it answers a request only when it names
// every resource of its type, and a new snapshot holding a name the request
// does not discards the watch all the same (cache/v3/simple.go: respond
// returns without sending, respondSOTWWatches deletes the watch): the stream
// hears nothing more of the type, whatever later snapshots hold, until its
// client asks again. An Envoy asks again once it reads the listener that
// names the new route; a relay asks what its clients ask, and when the one
// that would have asked leaves first, it never does: no relay could work
// around that. Kept, the watch is answered by the first snapshot it can be.
type keptWatches struct {
	explicitWildcard
	mu      sync.Mutex
	watches map[*keptWatch]bool // named watches go-control-plane holds or dropped unanswered
}

// keptWatch is one named SotW watch the server has open.
type keptWatch struct {
	req      *cache.Request
	sub      cache.Subscription
	ch       chan cache.Response
	cancel   func() // go-control-plane's, while it holds the watch
	stranded bool   // dropped by go-control-plane without an answer
}

// CreateWatch opens the server's watch, keeping it if named. Its cancel
// takes mu too, so that go-control-plane's count of watches moves only
// under it.
func (k *keptWatches) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := &keptWatch{req: req, sub: sub, ch: ch}
	if sub.IsWildcard() || len(req.GetResourceNames()) == 0 {
		cancel, err := k.explicitWildcard.CreateWatch(req, sub, ch)
		w.cancel = cancel // not kept: go-control-plane answers it
		return k.canceller(w), err
	}
	if err := k.watchLocked(w); err != nil {
		return nil, err
	}
	return k.canceller(w), nil
}

// canceller returns the server's cancel of w.
func (k *keptWatches) canceller(w *keptWatch) func() {
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.watches, w)
		if w.cancel != nil {
			w.cancel()
		}
	}
}

// watchLocked hands w to go-control-plane and notes what became of it: held,
// answered (forgotten: the client's next request replaces it) or dropped.
// Called with mu held, which every SotW watch's creation and cancellation
// takes: the number of watches go-control-plane holds changes only here.
func (k *keptWatches) watchLocked(w *keptWatch) error {
	held := k.heldWatches()
	cancel, err := k.explicitWildcard.CreateWatch(w.req, w.sub, w.ch)
	switch {
	case err != nil:
		return err
	case k.heldWatches() > held:
		w.cancel, w.stranded = cancel, false
		k.watches[w] = true
	case k.answerable(w):
		delete(k.watches, w)
	default:
		w.cancel, w.stranded = nil, true
		k.watches[w] = true
	}
	return nil
}

// setSnapshot serves s, notes the watches go-control-plane answered or
// dropped for it, and hands it again those it dropped that s answers.
func (k *keptWatches) setSnapshot(s *cache.Snapshot) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.SetSnapshot(context.Background(), worldKey, s); err != nil {
		return err
	}
	for w := range k.watches {
		switch {
		case !w.stranded && w.req.GetVersionInfo() == s.GetVersion(w.req.GetTypeUrl()):
			// still held: go-control-plane answers a new version only
		case !k.answerable(w):
			w.cancel, w.stranded = nil, true
		case w.stranded:
			if err := k.watchLocked(w); err != nil {
				return err
			}
		default:
			delete(k.watches, w) // answered
		}
	}
	return nil
}

// heldWatches is the number of SotW watches go-control-plane holds.
func (k *keptWatches) heldWatches() int {
	if info := k.GetStatusInfo(worldKey); info != nil {
		return info.GetNumWatches()
	}
	return 0
}

// answerable reports whether go-control-plane answers w's request from its
// snapshot: it names every resource of its type (ADS mode).
func (k *keptWatches) answerable(w *keptWatch) bool {
	snap, err := k.GetSnapshot(worldKey)
	if err != nil {
		return false
	}
	names := w.req.GetResourceNames()
	for n := range snap.GetResources(w.req.GetTypeUrl()) {
		if !slices.Contains(names, n) {
			return false
		}
	}
	return true
}

// register serves go-control-plane's ADS on srv, with the World's latest
// snapshot.
func (g *gcpServer) register(srv *grpc.Server, u *Upstream) {
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.cancel = cancel
	g.mu.Unlock()
	g.set(u.world.Current())
	var opts []config.XDSOption
	if g.ordered {
		opts = append(opts, sotw.WithOrderedADS())
	}
	discoverypb.RegisterAggregatedDiscoveryServiceServer(srv, xdsserver.NewServer(ctx, g.cache, g.callbacks(u), opts...))
}

func (g *gcpServer) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
		g.cancel = nil
	}
}

// set makes snap the snapshot every node is served.
func (g *gcpServer) set(snap *Snapshot) {
	res := map[string][]types.Resource{}
	for _, t := range worldTypes {
		res[t] = []types.Resource{} // an empty type is served too
		for _, n := range snap.Names(t) {
			r := snap.Select(t, n, "")
			m, err := anypb.UnmarshalNew(&anypb.Any{TypeUrl: t, Value: r.Body}, proto.UnmarshalOptions{})
			if err != nil {
				panic(err) // the world's own bytes
			}
			res[t] = append(res[t], m)
		}
	}
	s, err := cache.NewSnapshot(version(snap), res)
	if err == nil {
		err = g.cache.setSnapshot(s)
	}
	if err != nil {
		panic(err)
	}
}

// callbacks record, as the Upstream's streams do (see window), what each
// relay scope was sent and acknowledged.
func (g *gcpServer) callbacks(u *Upstream) xdsserver.CallbackFuncs {
	return xdsserver.CallbackFuncs{
		StreamRequestFunc: func(id int64, req *discoverypb.DiscoveryRequest) error {
			covers := sotwCovers(req)
			g.request(u, gcpStreamID{id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail() != nil, covers)
			g.subscribedSotW(u, id, req.GetTypeUrl(), covers)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discoverypb.DiscoveryRequest, resp *discoverypb.DiscoveryResponse) {
			if len(req.GetResourceNames()) == 0 && !keying.WildcardCapable(req.GetTypeUrl()) {
				// The relay subscribes nothing of the type (xDS); go-control-plane
				// answers with everything, which the relay ignores: it learns
				// nothing of the type's state (seed 7009 with -oracle.dims gcp).
				return
			}
			g.response(u, gcpStreamID{id: id}, resp, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
		},
		StreamDeltaRequestFunc: func(id int64, req *discoverypb.DeltaDiscoveryRequest) error {
			g.request(u, gcpStreamID{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail() != nil,
				nil)
			g.untold(u, gcpStreamID{delta: true, id: id}, req.GetTypeUrl(), req.GetResourceNamesUnsubscribe())
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoverypb.DeltaDiscoveryRequest, resp *discoverypb.DeltaDiscoveryResponse) {
			g.response(u, gcpStreamID{delta: true, id: id}, resp, resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo())
		},
		StreamClosedFunc:      func(id int64, _ *core.Node) { g.closed(gcpStreamID{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { g.closed(gcpStreamID{delta: true, id: id}) },
	}
}

// stream returns the record of stream id. Called with g.mu held.
func (g *gcpServer) stream(id gcpStreamID) *gcpPending {
	p := g.streams[id]
	if p == nil {
		p = &gcpPending{pending: map[string][]pendingIndex{}}
		g.streams[id] = p
	}
	return p
}

// request records a request: the stream's node (only the first request
// need carry it), and the acknowledgement (ACK or NACK, nack) of the
// response with nonce and those before it (an ACK: what it carried of the
// names the request subscribes, covers, is told; nil: all of it).
func (g *gcpServer) request(u *Upstream, id gcpStreamID, node *core.Node, typeURL, nonce string, nack bool,
	covers map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.stream(id)
	if p.node == "" {
		p.node = node.GetId()
	}
	for i, q := range p.pending[typeURL] {
		if q.nonce != nonce {
			continue
		}
		p.pending[typeURL] = p.pending[typeURL][i+1:]
		u.mu.Lock()
		u.ackedIndexLocked(p.node, "", typeURL, q.index) // its streams are not told apart by authority
		if !nack {
			u.toldLocked(p.node, coveredKeys(q.told, typeURL, covers), q.sent)
		}
		u.mu.Unlock()
		return
	}
}

// sotwCovers returns the names a SotW request subscribes, nil for the
// wildcard ("*", or no names for LDS and CDS): what its acknowledgement can
// tell the relay. A relay that subscribes nothing of a type ignores the
// response go-control-plane still sends it (as to a legacy wildcard), and
// ACKs it all the same.
func sotwCovers(req *discoverypb.DiscoveryRequest) map[string]bool {
	names := req.GetResourceNames()
	if slices.Contains(names, keying.Wildcard) || len(names) == 0 && keying.WildcardCapable(req.GetTypeUrl()) {
		return nil
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

// coveredKeys returns the keys ("type name", toldKeys) of typeURL whose name
// covers holds; all of them when covers is nil.
func coveredKeys(keys []string, typeURL string, covers map[string]bool) []string {
	if covers == nil {
		return keys
	}
	var out []string
	for _, k := range keys {
		if covers[strings.TrimPrefix(k, typeURL+" ")] {
			out = append(out, k)
		}
	}
	return out
}

// subscribedSotW records the names a SotW request of typeURL subscribes
// (covers, sotwCovers) and forgets what the relay was told of those it
// drops (Upstream.untoldLocked), unless the wildcard covers them.
func (g *gcpServer) subscribedSotW(u *Upstream, id int64, typeURL string, covers map[string]bool) {
	g.mu.Lock()
	p := g.stream(gcpStreamID{id: id})
	was := p.names[typeURL]
	if p.names == nil {
		p.names = map[string]map[string]bool{}
	}
	p.names[typeURL] = covers
	g.mu.Unlock()
	if covers == nil {
		return
	}
	var dropped []string
	for n := range was {
		if !covers[n] {
			dropped = append(dropped, n)
		}
	}
	g.untold(u, gcpStreamID{id: id}, typeURL, dropped)
}

// untold forgets what stream id's relay scope was told of names of typeURL,
// which it unsubscribed (Upstream.untoldLocked).
func (g *gcpServer) untold(u *Upstream, id gcpStreamID, typeURL string, names []string) {
	if len(names) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.stream(id)
	if instanceOf(p.node) == "" {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.untoldLocked(p.node, typeURL, names)
}

// response records a response about to be sent: its version names the
// World's snapshot it holds.
func (g *gcpServer) response(u *Upstream, id gcpStreamID, resp proto.Message, typeURL, nonce, version string) {
	index, err := strconv.Atoi(strings.TrimPrefix(version, "i"))
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.stream(id)
	if instanceOf(p.node) == "" {
		return
	}
	p.pending[typeURL] = append(p.pending[typeURL], pendingIndex{nonce, index, toldKeys(resp), time.Now()})
	u.mu.Lock()
	u.sentLocked(p.node, "", typeURL, index)
	u.mu.Unlock()
}

func (g *gcpServer) closed(id gcpStreamID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.streams, id)
}
