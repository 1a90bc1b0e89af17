package relay

import (
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// CacheEntryInfo is one cached resource variant in /debug/cache.
type CacheEntryInfo struct {
	// Scope is "" for the shared cache, "group:..." for a node group's,
	// "node:ID" for one node's own (secrets, do_not_cache).
	Scope       string `json:"scope,omitempty"`
	Type        string `json:"type"`
	Name        string `json:"name"`
	Constraints string `json:"constraints,omitempty"`
	Authority   string `json:"authority,omitempty"`
	Version     string `json:"version"`
	Bytes       int    `json:"bytes"`
	Subscribers int    `json:"subscribers"`
	// Selected lists, for a TP2 variant, the subscriptions it is sent to:
	// the name (no parameters) or "name{k=v&…}".
	Selected []string `json:"selected,omitempty"`
	// Any is the serialized google.protobuf.Any the variant is served in
	// (shared, read-only): the config dump's body.
	Any []byte `json:"-"`
}

// CacheFilter narrows /debug/cache. Empty fields match everything.
type CacheFilter struct {
	// Type is an exact type URL or its last segment ("Cluster").
	Type       string
	NamePrefix string
	Authority  string
}

func (f CacheFilter) matchType(t string) bool {
	return f.Type == "" || f.Type == t || keying.ShortType(t) == f.Type
}

// ClientInfo is one downstream stream in /debug/clients.
type ClientInfo = downstream.StreamInfo

// UpstreamInfo is one upstream connection in /debug/upstreams.
type UpstreamInfo = upstream.Status

// DebugCache lists the cached variants matching f, sorted by type and name.
func (r *Relay) DebugCache(f CacheFilter) []CacheEntryInfo {
	s := r.lock()
	defer s.unlock()
	out := []CacheEntryInfo{}
	for _, sc := range s.scopes {
		for t, tc := range sc.types {
			if !f.matchType(t) {
				continue
			}
			for name, res := range tc.view.Resources {
				if name != res.Name || tc.variantMode(name) {
					continue // a TP2 selection, or a name listed by its variants below
				}
				if !strings.HasPrefix(name, f.NamePrefix) || (f.Authority != "" && res.Authority != f.Authority) {
					continue
				}
				out = append(out, CacheEntryInfo{Scope: sc.key, Type: t, Name: name, Authority: res.Authority,
					Version: res.Version, Bytes: len(res.Any), Subscribers: tc.subscribers(name, res), Any: res.Any})
			}
			for name, known := range tc.names {
				if !known.variantMode || !strings.HasPrefix(name, f.NamePrefix) {
					continue
				}
				for res, keys := range tc.variantInfo(name) {
					if f.Authority != "" && res.Authority != f.Authority {
						continue
					}
					e := CacheEntryInfo{Scope: sc.key, Type: t, Name: name, Constraints: res.Constraints,
						Authority: res.Authority, Version: res.Version, Bytes: len(res.Any), Any: res.Any}
					for _, k := range keys {
						e.Subscribers += tc.subscribers(k, tc.view.Resources[k])
						e.Selected = append(e.Selected, keying.DisplayKey(k))
					}
					out = append(out, e)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Constraints < out[j].Constraints
	})
	return out
}

// subscribers counts the streams that watch key, by name or by wildcard.
func (tc *typeCache) subscribers(key string, res *downstream.Resource) int {
	subs := tc.watchers[key].len()
	if res.InWildcard() && key == res.Name && keying.WildcardCapable(tc.typeURL) {
		for id := range tc.wild.all {
			if !tc.watchers[key].contains(id) {
				subs++
			}
		}
	}
	return subs
}

// DebugClients lists the downstream streams, the REST polls being held and
// the gateway data plane streams, only those of nodeID when it is non-empty,
// sorted by stream id.
func (r *Relay) DebugClients(nodeID string) []ClientInfo {
	out := append(r.ds.Streams(nodeID), r.dialectClients(nodeID)...)
	slices.SortFunc(out, func(a, b ClientInfo) int { return int(a.ID) - int(b.ID) })
	return out
}

// ClientQuery selects a page of /debug/clients. Zero fields take defaults.
type ClientQuery struct {
	// Node is a glob ('*' matches any run) on the node id.
	Node string
	// Type is a type URL or its last segment ("Cluster"): streams that
	// requested it. Name: streams subscribed to that resource name.
	Type, Name string
	// After is the stream id the page starts after (the previous page's
	// last); Limit the most streams on the page (default 100, at most 1000);
	// Names the most names listed per type (default 100).
	After        uint64
	Limit, Names int
}

// Limits of ClientQuery.
const (
	DefaultClientsLimit = 100
	MaxClientsLimit     = 1000
	DefaultClientNames  = 100
)

// ClientPage is one page of /debug/clients.
type ClientPage struct {
	// Total is how many streams match the filter (on every page).
	Total int `json:"total"`
	// Streams are the page's streams, by id.
	Streams []PagedClient `json:"streams"`
	// Next is the path of the next page; empty on the last one.
	Next string `json:"next,omitempty"`
}

// PagedClient is a stream of a ClientPage: its names are cut to the query's
// Names per type.
type PagedClient struct {
	ClientInfo
	// NamesTotal holds, for each type whose names were cut, how many it has.
	NamesTotal map[string]int `json:"names_total,omitempty"`
}

// DebugClientsPage returns the page of downstream streams q selects. Its
// size is bounded by q.Limit streams and q.Names names per type, whatever
// the fleet.
func (r *Relay) DebugClientsPage(q ClientQuery) ClientPage {
	if q.Limit <= 0 {
		q.Limit = DefaultClientsLimit
	}
	q.Limit = min(q.Limit, MaxClientsLimit)
	if q.Names <= 0 {
		q.Names = DefaultClientNames
	}
	f := downstream.StreamFilter{Type: q.Type, Name: q.Name}
	if q.Node != "" {
		f.Node = func(id string) bool { return authz.Match(q.Node, id) }
	}
	infos, total := r.ds.StreamsPage(f, q.After, q.Limit+1) // one more: is there a next page?
	more := len(infos) > q.Limit
	infos = infos[:min(len(infos), q.Limit)]
	page := ClientPage{Total: total, Streams: make([]PagedClient, 0, len(infos))}
	for _, info := range infos {
		pc := PagedClient{ClientInfo: info}
		for t, ti := range info.Types {
			if len(ti.Names) > q.Names {
				if pc.NamesTotal == nil {
					pc.NamesTotal = make(map[string]int)
				}
				pc.NamesTotal[t] = len(ti.Names)
				ti.Names = ti.Names[:q.Names]
				info.Types[t] = ti
			}
		}
		page.Streams = append(page.Streams, pc)
	}
	if more {
		last := page.Streams[len(page.Streams)-1].ID
		v := url.Values{"after": {strconv.FormatUint(last, 10)}, "limit": {strconv.Itoa(q.Limit)}}
		for k, val := range map[string]string{"node": q.Node, "type": q.Type, "name": q.Name} {
			if val != "" {
				v.Set(k, val)
			}
		}
		if q.Names != DefaultClientNames {
			v.Set("names", strconv.Itoa(q.Names))
		}
		page.Next = "/debug/clients?" + v.Encode()
	}
	return page
}

// DebugUpstreams lists the upstream connections, by authority.
func (r *Relay) DebugUpstreams() []UpstreamInfo {
	s := r.lock()
	var clients []*upstream.Client
	for _, sc := range s.scopes {
		for _, c := range sc.upstreams {
			clients = append(clients, c)
		}
	}
	s.unlock()
	out := make([]UpstreamInfo, 0, len(clients))
	for _, c := range clients {
		out = append(out, c.Status())
	}
	slices.SortFunc(out, func(a, b UpstreamInfo) int { return strings.Compare(a.Authority, b.Authority) })
	return out
}
