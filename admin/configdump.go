package admin

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/relay"
)

// Paging of GET /debug/config_dump.
const (
	dumpDefaultLimit = 100
	dumpMaxLimit     = 1000
)

// dumpPath is the path of the config dump, and of its next pages.
const dumpPath = "/debug/config_dump"

// DumpEntry is one resource of GET /debug/config_dump.
type DumpEntry struct {
	TypeURL string `json:"type_url"`
	Name    string `json:"name"`
	// Version is the version served to clients (derived from the bytes).
	Version string `json:"version"`
	// Scope is "" for the shared cache, "group:..." for a node group's,
	// "node:ID" for one node's own; Constraints a TP2 variant's.
	Scope       string `json:"scope,omitempty"`
	Constraints string `json:"constraints,omitempty"`
	// Resource is the resource in proto3 JSON with its "@type"; a type not
	// linked into the relay as {"@type", "value": base64}.
	Resource json.RawMessage `json:"resource"`

	body []byte // the serialized Any
}

// DumpPage is one page of GET /debug/config_dump: Next is the path and
// query of the next page, with the same filters ("" on the last).
type DumpPage struct {
	Resources []DumpEntry `json:"resources"`
	Next      string      `json:"next"`
}

// dumpQuery is a parsed config dump request.
type dumpQuery struct {
	typ, name, node string
	limit           int
	after           string // the sort key the page starts after
}

// parseDumpQuery reads the query of /debug/config_dump; an unknown
// parameter or a bad value is an error naming it.
func parseDumpQuery(v url.Values) (dumpQuery, error) {
	q := dumpQuery{typ: v.Get("type"), name: v.Get("name"), node: v.Get("node"), limit: dumpDefaultLimit}
	for k := range v {
		switch k {
		case "type", "name", "node", "limit", "next":
		default:
			return q, fmt.Errorf("unknown parameter %q (want type, name, node, limit, next)", k)
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > dumpMaxLimit {
			return q, fmt.Errorf("limit=%q: want an integer from 1 to %d", s, dumpMaxLimit)
		}
		q.limit = n
	}
	if s := v.Get("next"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return q, fmt.Errorf("next=%q: not a page token of this endpoint", s)
		}
		q.after = string(b)
	}
	return q, nil
}

// nextURL is the path and query of the page after the entry with key last.
func (q dumpQuery) nextURL(last string) string {
	v := url.Values{}
	for k, s := range map[string]string{"type": q.typ, "name": q.name, "node": q.node} {
		if s != "" {
			v.Set(k, s)
		}
	}
	v.Set("limit", strconv.Itoa(q.limit))
	v.Set("next", base64.RawURLEncoding.EncodeToString([]byte(last)))
	return dumpPath + "?" + v.Encode()
}

// key is an entry's sort and paging key.
func (e *DumpEntry) key() string {
	return strings.Join([]string{e.TypeURL, e.Name, e.Scope, e.Constraints, e.Version}, "\x00")
}

// configDump serves GET /debug/config_dump.
func (s *server) configDump(w http.ResponseWriter, req *http.Request) {
	q, err := parseDumpQuery(req.URL.Query())
	if err != nil {
		http.Error(w, "admin: "+dumpPath+": "+err.Error(), http.StatusBadRequest)
		return
	}
	all := s.dumpEntries(q)
	slices.SortFunc(all, func(a, b DumpEntry) int { return cmp.Compare(a.key(), b.key()) })
	start, _ := slices.BinarySearchFunc(all, q.after, func(e DumpEntry, k string) int {
		if e.key() <= k {
			return -1
		}
		return 1
	})
	page := DumpPage{Resources: all[start:min(start+q.limit, len(all))]}
	if start+q.limit < len(all) {
		page.Next = q.nextURL(page.Resources[len(page.Resources)-1].key())
	}
	for i := range page.Resources {
		page.Resources[i].Resource = resourceJSON(page.Resources[i].body)
	}
	s.writeJSON(w, page)
}

// dumpEntries returns the resources q selects, unsorted and without JSON:
// what the node holds with q.node, the whole cache otherwise.
func (s *server) dumpEntries(q dumpQuery) []DumpEntry {
	match := func(typeURL, name string) bool {
		return (q.typ == "" || q.typ == typeURL || q.typ == keying.ShortType(typeURL)) && (q.name == "" || q.name == name)
	}
	out := []DumpEntry{}
	if q.node != "" {
		seen := map[string]bool{}
		for _, c := range s.src.DebugClients(q.node) {
			for typeURL, ti := range c.Types {
				for name, h := range ti.Holds {
					e := DumpEntry{TypeURL: typeURL, Name: name, Version: h.Version, body: h.Any}
					if match(typeURL, name) && h.Any != nil && !seen[e.key()] {
						seen[e.key()] = true
						out = append(out, e)
					}
				}
			}
		}
		return out
	}
	for _, c := range s.src.DebugCache(relay.CacheFilter{}) {
		if match(c.Type, c.Name) {
			out = append(out, DumpEntry{TypeURL: c.Type, Name: c.Name, Version: c.Version, Scope: c.Scope,
				Constraints: c.Constraints, body: c.Any})
		}
	}
	return out
}

// resourceJSON renders a serialized Any in proto3 JSON, with its "@type".
// Types are resolved from the protos linked into the relay (the xDS types
// and the extensions rest/types.go lists); a resource that does not resolve
// is written as {"@type", "value": base64 of its bytes}.
func resourceJSON(body []byte) json.RawMessage {
	a := &anypb.Any{}
	if err := proto.Unmarshal(body, a); err != nil {
		b, _ := json.Marshal(map[string]string{"error": "not a google.protobuf.Any: " + err.Error()})
		return b
	}
	if b, err := protojson.Marshal(a); err == nil {
		return b
	}
	b, _ := json.Marshal(map[string]string{"@type": a.GetTypeUrl(), "value": base64.StdEncoding.EncodeToString(a.GetValue())})
	return b
}
