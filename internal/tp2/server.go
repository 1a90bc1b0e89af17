// Package tp2 is a small authoritative xDS server speaking xRFC TP2 dynamic
// parameters: resource variants selected by the subscriber's parameters. It
// is the upstream of the relay's TP2 tests (internal/xdstest.StartTP2) and of
// xds-democp --variants. Responses queue per stream without bound: it is for
// demos and tests, not a fleet's control plane.
package tp2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// Server is a minimal authoritative ADS server that speaks xRFC TP2
// dynamic parameters, which go-control-plane's server ignores. It holds
// variants of resources keyed by (type URL, name, canonical constraints) and
// serves ADS SotW and Delta streams:
//
//   - A subscription is (name, params): a plain resource name has no params, a
//     ResourceLocator carries its dynamic parameters. Subscriptions to one name
//     with different params are independent. Wildcard subscriptions ("*" and
//     the legacy empty first request) are ignored.
//   - Each subscription gets the variant keying.Select picks for its params;
//     none matching: nothing is sent for it. Every resource goes out with its
//     ResourceName{name, constraints} and a per-variant version (a server-wide
//     counter taken by every Set, so no two variant contents share one).
//     Subscriptions selecting the same variant get it once per response.
//   - SotW: every response carries every variant the stream's subscriptions of
//     that type select (full state), each wrapped in a discovery Resource
//     (keying.ResourceWrapperType). A request with a stale response_nonce only
//     updates the subscriptions; a current one is answered when the
//     subscriptions differ from those of the last response (so ACKs and NACKs
//     get none). Set/Delete/Apply push to the streams whose selected set of
//     that type changed.
//   - Delta: the server tracks which variant each subscription holds. On
//     subscribe it sends the selected variant; when the selection changes it
//     sends the new variant and removes the old one (RemovedResourceNames, in
//     the same response) unless another subscription of the stream still
//     holds it. Unsubscribing sends nothing.
type Server struct {
	gen atomic.Uint64 // last variant version handed out

	mu       sync.Mutex
	variants map[string]map[string]map[string]*stored // type URL → name → canonical constraints → variant
	streams  map[*stream]struct{}
	// plainRemovals: Delta removals of unconstrained variants go in
	// removed_resources (SetPlainRemovals).
	plainRemovals bool
}

// Ref names one variant of a resource: its name and constraints
// (matched by canonical form; nil for the unconstrained variant).
type Ref struct {
	Name        string
	Constraints *discoverypb.DynamicParameterConstraints
}

// Variant is one variant of a resource with its content.
type Variant struct {
	Name        string
	Constraints *discoverypb.DynamicParameterConstraints
	Resource    proto.Message
}

// stored is one variant as served. It is immutable: a Set replaces it.
type stored struct {
	name, key string                // key: canonical constraints
	res       *discoverypb.Resource // Delta form
	wrapped   *anypb.Any            // SotW form (res as an Any)
	c         *discoverypb.DynamicParameterConstraints
}

func (v *stored) id() string { return v.name + "\x00" + v.key }

// sub is one subscription of a stream.
type sub struct {
	name   string
	params map[string]string
	held   *stored // Delta: the variant the client holds for it
}

func (u *sub) String() string {
	if p := keying.CanonicalParams(u.params); p != "" {
		return u.name + "{" + p + "}"
	}
	return u.name
}

// stream is the state of one ADS stream; guarded by Server.mu.
type stream struct {
	delta bool
	nonce int                   // last nonce handed out
	types map[string]*typeState // by type URL
	out   []proto.Message       // responses not yet sent
	wake  chan struct{}         // signalled when out grows
}

// typeState is the state of one type on a stream.
type typeState struct {
	subs map[string]*sub // by subKey
	// SotW only.
	answered string             // subscription keys of the last response
	sent     map[string]*stored // variants of the last response, by id
	nonce    string             // latest nonce sent
	version  int                // last version_info
}

func (st *stream) typ(typeURL string) *typeState {
	t := st.types[typeURL]
	if t == nil {
		t = &typeState{subs: map[string]*sub{}}
		st.types[typeURL] = t
	}
	return t
}

// New returns a Server without variants; Register serves it.
func New() *Server {
	return &Server{
		variants: map[string]map[string]map[string]*stored{},
		streams:  map[*stream]struct{}{},
	}
}

// Register adds the ADS service (SotW and Delta) to g.
func (s *Server) Register(g *grpc.Server) {
	discoverypb.RegisterAggregatedDiscoveryServiceServer(g, ads{s: s})
}

// Streams returns the number of streams currently open.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Subscriptions returns the subscriptions every open stream holds for
// typeURL, as "name" or "name{k=v&...}" (keying.CanonicalParams), sorted; a
// subscription appears once per stream that holds it.
func (s *Server) Subscriptions(typeURL string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for st := range s.streams {
		for _, sub := range st.types[typeURL].subsOrNil() {
			out = append(out, sub.String())
		}
	}
	slices.Sort(out)
	return out
}

// SetPlainRemovals has Delta streams remove unconstrained variants in
// removed_resources instead of removed_resource_names, as a server may: the
// xRFC requires the latter only for variants sent with constraints.
func (s *Server) SetPlainRemovals(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plainRemovals = on
}

// Set adds or replaces (by canonical constraints) one variant of typeURL/name
// and pushes what changed.
func (s *Server) Set(typeURL, name string, c *discoverypb.DynamicParameterConstraints, res proto.Message) error {
	return s.Apply(typeURL, nil, []Variant{{Name: name, Constraints: c, Resource: res}})
}

// Delete removes one variant of typeURL/name (if present) and pushes.
func (s *Server) Delete(typeURL, name string, c *discoverypb.DynamicParameterConstraints) error {
	return s.Apply(typeURL, []Ref{{Name: name, Constraints: c}}, nil)
}

// Apply applies deletes, then sets, of one type atomically and pushes once:
// the TP2 transition (deleting a variant and creating its replacements in a
// single xDS response).
func (s *Server) Apply(typeURL string, deletes []Ref, sets []Variant) error {
	made := make([]*stored, len(sets))
	for i, v := range sets {
		content, err := anypb.New(v.Resource)
		if err != nil {
			return fmt.Errorf("tp2: %s %q: %w", typeURL, v.Name, err)
		}
		c := v.Constraints
		if c != nil {
			c = proto.Clone(c).(*discoverypb.DynamicParameterConstraints)
		}
		res := &discoverypb.Resource{
			ResourceName: &discoverypb.ResourceName{Name: v.Name, DynamicParameterConstraints: c},
			Version:      strconv.FormatUint(s.gen.Add(1), 10),
			Resource:     content,
		}
		wrapped, err := anypb.New(res)
		if err != nil {
			return fmt.Errorf("tp2: wrap %q: %w", v.Name, err)
		}
		made[i] = &stored{name: v.Name, key: keying.CanonicalConstraints(c), res: res, wrapped: wrapped, c: c}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	byName := s.variants[typeURL]
	if byName == nil {
		byName = map[string]map[string]*stored{}
		s.variants[typeURL] = byName
	}
	for _, d := range deletes {
		delete(byName[d.Name], keying.CanonicalConstraints(d.Constraints))
		if len(byName[d.Name]) == 0 {
			delete(byName, d.Name)
		}
	}
	for _, v := range made {
		if byName[v.name] == nil {
			byName[v.name] = map[string]*stored{}
		}
		byName[v.name][v.key] = v
	}
	for st := range s.streams {
		switch t := st.types[typeURL]; {
		case t == nil:
		case st.delta:
			s.deltaPushLocked(st, typeURL, t)
		default:
			s.sotwPushLocked(st, typeURL, t, false)
		}
	}
	return nil
}

// selectLocked returns the variant sub selects, nil if none matches.
func (s *Server) selectLocked(typeURL string, sub *sub) *stored {
	vs := s.variants[typeURL][sub.name]
	if len(vs) == 0 {
		return nil
	}
	list := make([]keying.Variant, 0, len(vs))
	for key, v := range vs {
		list = append(list, keying.Variant{Constraints: v.c, Key: key})
	}
	best, _, ok := keying.Select(list, sub.params)
	if !ok {
		return nil
	}
	return vs[best.Key]
}

func (t *typeState) subsOrNil() map[string]*sub {
	if t == nil {
		return nil
	}
	return t.subs
}

// subKeys returns the sorted keys of subs, joined.
func subKeys(subs map[string]*sub) string {
	return strings.Join(slices.Sorted(maps.Keys(subs)), "\x01")
}

func (st *stream) enqueue(m proto.Message) {
	st.out = append(st.out, m)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *stream) nextNonce() string {
	st.nonce++
	return strconv.Itoa(st.nonce)
}

// subKey identifies a subscription within a stream and type.
func subKey(name string, params map[string]string) string {
	return name + "\x00" + keying.CanonicalParams(params)
}

// addSubs adds the subscriptions of names and locators to subs, skipping
// the wildcard.
func addSubs(subs map[string]*sub, names []string, locs []*discoverypb.ResourceLocator) {
	for _, n := range names {
		if n != "" && n != keying.Wildcard {
			subs[subKey(n, nil)] = &sub{name: n}
		}
	}
	for _, l := range locs {
		if n := l.GetName(); n != "" && n != keying.Wildcard {
			subs[subKey(n, l.GetDynamicParameters())] = &sub{name: n, params: maps.Clone(l.GetDynamicParameters())}
		}
	}
}

// sotwPushLocked sends st the full selected set of typeURL if it differs from
// the last one sent, or always if force.
func (s *Server) sotwPushLocked(st *stream, typeURL string, t *typeState, force bool) {
	sel := map[string]*stored{}
	for _, sub := range t.subs {
		if v := s.selectLocked(typeURL, sub); v != nil {
			sel[v.id()] = v
		}
	}
	if !force && maps.Equal(sel, t.sent) {
		return
	}
	t.sent, t.answered = sel, subKeys(t.subs)
	t.version++
	t.nonce = st.nextNonce()
	resp := &discoverypb.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: strconv.Itoa(t.version), Nonce: t.nonce}
	for _, id := range slices.Sorted(maps.Keys(sel)) {
		resp.Resources = append(resp.Resources, sel[id].wrapped)
	}
	st.enqueue(resp)
}

func (s *Server) sotwRequest(st *stream, req *discoverypb.DiscoveryRequest) {
	if req.GetTypeUrl() == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := st.typ(req.GetTypeUrl())
	t.subs = map[string]*sub{}
	addSubs(t.subs, req.GetResourceNames(), req.GetResourceLocators())
	switch keys := subKeys(t.subs); {
	case req.GetResponseNonce() != t.nonce:
		// Stale: the subscriptions are noted for the next push or current request.
	case keys == t.answered:
		// ACK or NACK.
	case len(t.subs) == 0:
		t.answered, t.sent = keys, nil // unsubscribed from everything: nothing to send
	default:
		s.sotwPushLocked(st, req.GetTypeUrl(), t, true)
	}
}

// deltaPushLocked sends st what changed for its subscriptions of typeURL:
// every newly selected variant, and the removal of variants no subscription
// holds any more, in one response.
func (s *Server) deltaPushLocked(st *stream, typeURL string, t *typeState) {
	resp := &discoverypb.DeltaDiscoveryResponse{TypeUrl: typeURL}
	sent := map[string]bool{}
	var dropped []*stored
	for _, k := range slices.Sorted(maps.Keys(t.subs)) {
		sub := t.subs[k]
		v := s.selectLocked(typeURL, sub)
		if v == sub.held {
			continue
		}
		if v != nil && !sent[v.id()] {
			sent[v.id()] = true
			resp.Resources = append(resp.Resources, v.res)
		}
		if sub.held != nil && (v == nil || v.id() != sub.held.id()) {
			dropped = append(dropped, sub.held)
		}
		sub.held = v
	}
	held := map[string]bool{}
	for _, sub := range t.subs {
		if sub.held != nil {
			held[sub.held.id()] = true
		}
	}
	for _, d := range dropped {
		if held[d.id()] {
			continue
		}
		held[d.id()] = true // remove once
		if d.c == nil && s.plainRemovals {
			resp.RemovedResources = append(resp.RemovedResources, d.name)
			continue
		}
		resp.RemovedResourceNames = append(resp.RemovedResourceNames,
			&discoverypb.ResourceName{Name: d.name, DynamicParameterConstraints: d.c})
	}
	if len(resp.Resources) == 0 && len(resp.RemovedResourceNames) == 0 && len(resp.RemovedResources) == 0 {
		return
	}
	resp.Nonce = st.nextNonce()
	resp.SystemVersionInfo = "tp2-" + resp.Nonce
	st.enqueue(resp)
}

func (s *Server) deltaRequest(st *stream, req *discoverypb.DeltaDiscoveryRequest) {
	if req.GetTypeUrl() == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := st.types[req.GetTypeUrl()] == nil
	t := st.typ(req.GetTypeUrl())
	unsub := map[string]*sub{}
	addSubs(unsub, req.GetResourceNamesUnsubscribe(), req.GetResourceLocatorsUnsubscribe())
	for k := range unsub {
		delete(t.subs, k) // the client forgets what it held for it: nothing to send
	}
	addSubs(t.subs, req.GetResourceNamesSubscribe(), req.GetResourceLocatorsSubscribe()) // (re)subscribing resends
	if first {
		s.declaredLocked(req.GetTypeUrl(), t, req.GetInitialResourceVersions())
	}
	s.deltaPushLocked(st, req.GetTypeUrl(), t)
}

// declaredLocked records what a first request's initial_resource_versions
// say the client holds of the names it subscribes, as go-control-plane does:
// a variant of the same version is not sent again, and one the server does
// not have (or has at another version) is sent, or removed when nothing is
// selected.
func (s *Server) declaredLocked(typeURL string, t *typeState, versions map[string]string) {
	for n, ver := range versions {
		u := t.subs[subKey(n, nil)]
		if u == nil {
			continue
		}
		if v := s.selectLocked(typeURL, u); v != nil && v.res.GetVersion() == ver {
			u.held = v
		} else {
			u.held = &stored{name: n} // the plain variant, at a version the server does not serve
		}
	}
}

// serve runs one stream: it registers it, sends its queued responses from a
// second goroutine and calls recv until the stream ends.
func (s *Server) serve(ss grpc.ServerStream, delta bool, recv func(*stream) error) error {
	st := &stream{
		delta: delta,
		types: map[string]*typeState{},
		wake:  make(chan struct{}, 1),
	}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ss.Context())
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-st.wake:
			}
			s.mu.Lock()
			out := st.out
			st.out = nil
			s.mu.Unlock()
			for _, m := range out {
				if ss.SendMsg(m) != nil {
					return // the stream is broken; recv fails too
				}
			}
		}
	}()
	defer func() {
		cancel()
		<-sendDone
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	}()
	for {
		if err := recv(st); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// ads is the gRPC face of a Server.
type ads struct {
	discoverypb.UnimplementedAggregatedDiscoveryServiceServer
	s *Server
}

func (a ads) StreamAggregatedResources(ss discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.s.serve(ss, false, func(st *stream) error {
		req, err := ss.Recv()
		if err == nil {
			a.s.sotwRequest(st, req)
		}
		return err
	})
}

func (a ads) DeltaAggregatedResources(ss discoverypb.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.s.serve(ss, true, func(st *stream) error {
		req, err := ss.Recv()
		if err == nil {
			a.s.deltaRequest(st, req)
		}
		return err
	})
}
