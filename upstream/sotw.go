package upstream

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/keying"
)

// sotwStream is a state-of-the-world ADS stream.
type sotwStream struct {
	c      *Client
	server string
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient

	nodeSent bool // owned by the sender goroutine
}

// flush sends one request per pending type. xDS: only the first request of a
// stream is guaranteed to carry the node, so only that one does.
func (s *sotwStream) flush() error {
	for _, req := range s.c.takeSotW() {
		if !s.nodeSent {
			req.Node = s.c.cfg.Node
			s.nodeSent = true
		}
		if ce := s.c.log.Check(zap.DebugLevel, "sending request"); ce != nil {
			ce.Write(zap.String("server", s.server), zap.String("type", req.GetTypeUrl()),
				zap.Strings("names", req.GetResourceNames()), zap.String("version", req.GetVersionInfo()),
				zap.String("nonce", req.GetResponseNonce()), zap.Bool("nack", req.GetErrorDetail() != nil))
		}
		if err := s.stream.Send(req); err != nil {
			return fmt.Errorf("upstream: send to %s: %w", s.server, err)
		}
	}
	return nil
}

// takeSotW builds the request for every pending type: the full name list,
// the last accepted version, the last nonce, and the NACK if one is pending.
// A request therefore ACKs (or NACKs) the latest response and carries the
// latest subscription at once; the server only honours the latest nonce.
func (c *Client) takeSotW() []*discoveryv3.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*discoveryv3.DiscoveryRequest, 0, len(c.pending))
	for _, t := range c.pending {
		st := c.types[t]
		st.dirty = false
		nack := st.nack
		st.nack = nil
		if !st.requested && len(st.names) == 0 && (st.nonce == "" || keying.WildcardCapable(t)) {
			// Nothing to ask for. xDS: a first request with no names is a
			// legacy wildcard subscription for LDS/CDS, so an unsolicited
			// response of those types is not ACKed.
			continue
		}
		if !st.requested {
			st.wildSure = st.wildcard() // settle.go: in the first request
			c.armSettleLocked(st)
			if keying.FullState(t) {
				st.sure = make(map[string]struct{}, len(st.names))
				st.keys = make(map[string]struct{})
				st.globs = make(map[string]struct{})
				for n := range st.names {
					switch {
					case keying.HasParams(n):
						st.keys[n] = struct{}{}
					case keying.IsGlob(n):
						st.globs[n] = struct{}{}
					case n != keying.Wildcard && !keying.IsGlob(n):
						st.sure[n] = struct{}{}
					}
				}
			}
		}
		st.requested = true
		sorted := st.sortedNames()
		st.noteAskedLocked(sorted, st.version == "" || nack != nil)
		names, locs := locators(sorted)
		if st.wildcard() && len(names) == 1 && len(locs) == 0 && !st.named {
			// A wildcard alone goes out as the legacy empty list, which every
			// server understands (go-control-plane's SnapshotCache answers an
			// explicit "*" with nothing); "*" is explicit once names were sent.
			names = nil
		} else if len(names)+len(locs) > 0 {
			st.named = true
		}
		req := &discoveryv3.DiscoveryRequest{
			TypeUrl:          t,
			ResourceNames:    names,
			ResourceLocators: locs,
			VersionInfo:      st.version,
			ResponseNonce:    st.nonce,
		}
		if nack != nil {
			req.ErrorDetail = nackStatus(nack)
		}
		out = append(out, req)
	}
	c.pending = c.pending[:0]
	return out
}

func (s *sotwStream) recvLoop() (bool, error) {
	received := false
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			return received, fmt.Errorf("upstream: receive from %s: %w", s.server, err)
		}
		received = true
		s.c.onSotWResponse(s.server, resp)
	}
}

// onSotWResponse validates a response, hands it to the Handler and queues
// the ACK or NACK.
func (c *Client) onSotWResponse(server string, resp *discoveryv3.DiscoveryResponse) {
	typeURL := resp.GetTypeUrl()
	log := c.log.With(zap.String("server", server), zap.String("type", typeURL),
		zap.String("version", resp.GetVersionInfo()), zap.String("nonce", resp.GetNonce()))
	if typeURL == "" {
		log.Warn("ignoring response without type_url")
		return
	}
	resources, verr := decodeSotW(resp)

	c.mu.Lock()
	st := c.typeLocked(typeURL)
	answered := st.answeredLocked()
	if len(st.names) == 0 {
		// Not subscribed: ACK and ignore.
		st.version, st.nonce, st.nack = resp.GetVersionInfo(), resp.GetNonce(), nil
		c.markDirtyLocked(typeURL, st)
		c.mu.Unlock()
		c.notify()
		log.Debug("ignoring response for a type not subscribed")
		return
	}
	if verr != nil {
		st.nonce, st.nack = resp.GetNonce(), verr
		c.rejectedLocked(typeURL, st)
		c.markDirtyLocked(typeURL, st)
		c.mu.Unlock()
		c.notify()
		log.Warn("rejecting invalid response", zap.Error(verr))
		return
	}
	u, full := c.sotwUpdateLocked(server, st, typeURL, resp, resources)
	reasks := st.reasks
	c.mu.Unlock()

	err := c.handle(u)

	c.mu.Lock()
	st.nonce = resp.GetNonce()
	if err != nil {
		st.nack = err
		c.rejectedLocked(typeURL, st)
	} else {
		st.version, st.nack = resp.GetVersionInfo(), nil
		if st.reasks != reasks {
			// Asked again meanwhile (Subscribe): the requests built since
			// carry the older nonce, which the server ignores; the ACK asks.
			st.version = ""
		}
		st.seen = max(st.seen, answered)
		if full {
			st.knowLocked(resources)
		}
	}
	c.markDirtyLocked(typeURL, st)
	c.mu.Unlock()
	c.notify()
	if err != nil {
		log.Warn("handler rejected response", zap.Error(err))
	} else {
		log.Debug("accepted response", zap.Int("resources", len(resources)), zap.Int("removed", len(u.Removed)))
	}
}

// sotwUpdateLocked builds the Update of a valid SotW response. For a full
// state (LDS, CDS; not a response of TTL heartbeats only, which is no
// update), reported by full, it lists the names the response deletes,
// judged by what the client knew it answers, and sets Keys. Called with
// c.mu held.
func (c *Client) sotwUpdateLocked(server string, st *typeState, typeURL string, resp *discoveryv3.DiscoveryResponse,
	resources []Resource) (u Update, full bool) {
	beats := len(resources) > 0 && !slices.ContainsFunc(resources, func(r Resource) bool { return !r.Heartbeat })
	u = Update{
		Server:    server,
		TypeURL:   typeURL,
		Resources: resources,
		Errors:    resourceErrors(resp.GetResourceErrors()),
	}
	if !beats {
		u.Complete = c.answered(st, resourceNames(resources))
	}
	if !keying.FullState(typeURL) || beats {
		return u, false
	}
	// xDS: a resource missing from a full-state response is deleted.
	in := make(map[string]struct{}, len(resources))
	for _, r := range resources {
		in[r.Name] = struct{}{}
	}
	for n := range st.known {
		if _, ok := in[n]; !ok {
			u.Removed = append(u.Removed, n)
		}
	}
	for n := range st.sure {
		_, ok := in[n]
		if _, known := st.known[n]; !ok && !known {
			u.Removed = append(u.Removed, n) // it was asked for by name from the start
		}
	}
	sort.Strings(u.Removed)
	proveGlobsLocked(st, resources)
	u.Globs = slices.Sorted(maps.Keys(st.globs))
	if !st.globSettled && c.unprovenGlobLocked(st) {
		c.armSettleLocked(st) // (settle.go: a new stream asks for the set)
	}
	u.Keys = make(map[string]struct{}, len(st.keys)+len(st.known)+len(st.sure))
	for _, set := range []map[string]struct{}{st.keys, st.sure} {
		maps.Copy(u.Keys, set)
	}
	for n := range st.known {
		if st.plainAnswered(n) {
			u.Keys[n] = struct{}{}
		}
	}
	return u, true
}

// plainAnswered reports whether a full-state response answers the plain
// name n: the stream subscribes it, its glob or the wildcard. A name known
// only through a TP2 key is not: the key's variants say nothing of the
// plain name's. Called with c.mu held.
func (st *typeState) plainAnswered(n string) bool {
	_, named := st.names[n]
	_, byGlob := st.names[keying.GlobOf(n)]
	return named || byGlob || st.wildcard()
}

// knowLocked records what an accepted full-state response told the client:
// the names it answered for a subscription (by name, glob or wildcard), whose
// omission later is a deletion. Called with c.mu held.
func (st *typeState) knowLocked(resources []Resource) {
	wildcard := st.wildcard()
	st.known = make(map[string]struct{}, len(resources))
	named := make(map[string]struct{}, len(st.names))
	for k := range st.names {
		n, _ := keying.SplitSubscriptionKey(k) // TP2 locators too
		named[n] = struct{}{}
	}
	matchKeys(st, resources)
	for _, r := range resources {
		_, byName := named[r.Name]
		_, byGlob := named[keying.GlobOf(r.Name)]
		if byName || byGlob || wildcard {
			st.known[r.Name] = struct{}{}
		}
	}
}

// proveGlobsLocked adds to st.globs the subscribed glob collections that a
// member in resources proves the server applies: only the glob brings a
// member the stream does not name, has not dropped and no wildcard covers.
// Called with c.mu held.
func proveGlobsLocked(st *typeState, resources []Resource) {
	st.globs = proveGlobs(st, st.globs, resources)
}

// proveGlobs adds to globs, and returns, the subscribed glob collections
// that a member in resources proves the server applies. Called with c.mu
// held.
func proveGlobs(st *typeState, globs map[string]struct{}, resources []Resource) map[string]struct{} {
	if st.wildcard() {
		return globs // the wildcard may list another authority's names too
	}
	for _, r := range resources {
		g := keying.GlobOf(r.Name)
		_, subscribed := st.names[g]
		_, dropped := st.dropped[r.Name]
		if subscribed && !dropped && !st.namedLocked(r.Name) {
			if globs == nil {
				globs = make(map[string]struct{})
			}
			globs[g] = struct{}{}
		}
	}
	return globs
}

// nackStatus is the error_detail of a NACK.
func nackStatus(err error) *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

// matchKeys adds to st.keys the subscribed TP2 keys a variant of an accepted
// full-state response matches when it matches no other subscribed key of the
// name: the server answered a request with them. (A variant another key
// matches too, the default one say, may answer an older request without
// the key.)
func matchKeys(st *typeState, resources []Resource) {
	type key struct {
		k      string
		params map[string]string
	}
	byName := make(map[string][]key)
	for k := range st.names {
		if !keying.HasParams(k) {
			continue
		}
		name, ps := keying.SplitSubscriptionKey(k)
		if params, err := keying.ParseParams(ps); err == nil {
			byName[name] = append(byName[name], key{k, params})
		}
	}
	for name := range byName {
		if _, plain := st.names[name]; plain {
			byName[name] = append(byName[name], key{name, nil}) // a plain subscriber is sent variants too
		}
	}
	for _, r := range resources {
		var only string
		for _, k := range byName[r.Name] {
			if keying.Match(r.Constraints, k.params) {
				if only != "" {
					only = ""
					break
				}
				only = k.k
			}
		}
		if keying.HasParams(only) {
			if st.keys == nil {
				st.keys = make(map[string]struct{})
			}
			st.keys[only] = struct{}{}
		}
	}
}
