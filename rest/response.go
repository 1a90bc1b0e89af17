package rest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// answer is what a poll would be answered from one View: the full state of
// its subscription (REST-JSON answers are State of the World).
type answer struct {
	version   string
	resources []*downstream.Resource // sorted by key
	errs      []*downstream.ResourceError
	// known: the answer may go out. It tells the client nothing is gone
	// that the View does not know is gone (REST-JSON is State of the World:
	// an LDS/CDS answer without a resource deletes it), so a cache that does
	// not know yet, or a Stale one to a client that holds config (it polls
	// with a version), is not answered: the poll is held, and the client
	// keeps what it has. So is a copy that may be older than the one such
	// a client holds (View.Doubtful), unless the client holds this relay's
	// own answer: no rollback.
	known bool
}

// key returns a resource's key in its View.
func key(r *downstream.Resource) string {
	if r.Key != "" {
		return r.Key
	}
	return r.Name
}

// plain reports whether r is keyed by its name (not a TP2 selection).
func plain(r *downstream.Resource) bool { return r.Key == "" || r.Key == r.Name }

// answer selects the poll's resources and errors from v.
func (p *poll) answer(v *downstream.View) answer {
	var a answer
	// holds: the client polls with a version, so it holds config (from this
	// relay or another): only the upstream's word may tell it something is
	// gone (View.Known). doubts: it is sent no copy that may be older than
	// its own (doubt) — unless its version is one of this relay's answers to
	// it (own): the View's copies are those or newer, as for a gRPC stream
	// that was sent them.
	holds := p.version != ""
	doubts := holds && !p.own
	seen := make(map[string]bool)
	doubt := false
	add := func(r *downstream.Resource) {
		if k := key(r); !seen[k] {
			seen[k] = true
			a.resources = append(a.resources, r)
			doubt = doubt || (doubts && v.Doubtful(k))
		}
	}
	// trust: what the View says of k being gone may be told to this client.
	trust := func(k string) bool { return p.version == "" || !v.Stale(k) }
	// some: the View says something of the subscription; all: of every
	// name of it, as a full-state (LDS/CDS) answer must.
	some, all := false, true
	if p.wildcard {
		if v.Known(keying.Wildcard, holds) && trust(keying.Wildcard) {
			some = true
		} else {
			all = false
		}
		for _, r := range v.Resources {
			if r.InWildcard() && plain(r) {
				add(r)
			}
		}
	}
	for _, k := range p.keys {
		if keying.IsGlob(k) {
			for _, r := range v.Resources {
				if r.Glob == k && plain(r) {
					add(r)
					some = true
				}
			}
			// A client that holds config may hold members the View does not
			// know of until the upstream answered the glob's set.
			if v.GlobAnswered(k) && trust(k) {
				some = true
			} else if p.version != "" {
				all = false
			}
			continue
		}
		if r, ok := v.Resources[k]; ok {
			add(r)
			some = true
		} else if e, ok := v.Errors[k]; ok && (trust(k) || !v.Gone(k)) {
			a.errs = append(a.errs, p.spelled(e)) // TP3: cached errors are answered like resources
			some = true
		} else if v.Known(k, holds) && trust(k) {
			some = true
		} else {
			all = false
		}
	}
	if len(p.denied) > 0 {
		a.errs = append(a.errs, p.denied...)
		some = true
	}
	a.known = some && (all || !keying.FullState(p.typeURL)) && !doubt
	slices.SortFunc(a.resources, func(x, y *downstream.Resource) int { return strings.Compare(key(x), key(y)) })
	slices.SortFunc(a.errs, func(x, y *downstream.ResourceError) int { return strings.Compare(x.Name, y.Name) })
	a.version = a.versionOf()
	return a
}

// spelled returns e named as the poll spelled its key: under the canonical
// key the client would match none of its names, and a full-state answer
// without its resource deletes it.
func (p *poll) spelled(e *downstream.ResourceError) *downstream.ResourceError {
	n, ok := p.spellings[e.Name]
	if !ok {
		return e
	}
	return &downstream.ResourceError{Name: n, Code: e.Code, Message: e.Message}
}

// versionOf derives the answer's version from what it carries: the same
// resources and errors, the same version, on every replica.
func (a answer) versionOf() string {
	h := sha256.New()
	for _, r := range a.resources {
		h.Write([]byte(key(r) + "\x00" + r.Version + "\x00"))
	}
	for _, e := range a.errs {
		h.Write([]byte("\x01" + e.Name + "\x00" + strconv.Itoa(int(e.Code)) + "\x00" + e.Message + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// encode returns the answer as a DiscoveryResponse in proto3 JSON, encoded
// once per (type, version) for every poll that gets it.
func (s *Server) encode(typeURL string, a answer) ([]byte, error) {
	k := bodyKey{typeURL: typeURL, version: a.version}
	s.mu.Lock()
	b, ok := s.bodies.Get(k)
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	resp := &discoverypb.DiscoveryResponse{VersionInfo: a.version, TypeUrl: typeURL}
	for _, r := range a.resources {
		res := new(anypb.Any)
		if err := proto.Unmarshal(r.Any, res); err != nil {
			return nil, fmt.Errorf("xds-relay: resource %q: %w", r.Name, err)
		}
		resp.Resources = append(resp.Resources, res)
	}
	for _, e := range a.errs {
		name, _ := keying.SplitSubscriptionKey(e.Name)
		resp.ResourceErrors = append(resp.ResourceErrors, &discoverypb.ResourceError{
			ResourceName: &discoverypb.ResourceName{Name: name},
			ErrorDetail:  &statuspb.Status{Code: int32(e.Code), Message: e.Message},
		})
	}
	b, err := protojson.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("xds-relay: cannot encode %s as JSON (is every type inside it linked into the relay? see rest/types.go): %w", typeURL, err)
	}
	s.mu.Lock()
	s.bodies.Add(k, b)
	s.mu.Unlock()
	return b, nil
}
