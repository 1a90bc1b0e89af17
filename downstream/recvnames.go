package downstream

import (
	"sync"
	"unique"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// sotwRequest is what a SotW handler receives into: the request, and the
// stream's memo of the names its previous requests carried. It is a proto
// message (its request's), so any codec can decode into it; this package's
// codec uses the memo.
type sotwRequest struct {
	*discoverypb.DiscoveryRequest
	memo *namesMemo
}

// namesMemo remembers, per type, the resource_names of a stream's last
// request of the type: every ACK of a subscription by name repeats them, and
// decoding, validating and allocating them again is most of its cost. Owned
// by the stream's handler goroutine.
type namesMemo struct {
	table *namesTable
	last  []typedNames
}

type typedNames struct {
	typeURL string
	e       *namesEntry
}

// maxMemoTypes bounds a stream's memo; a stream uses a few types.
const maxMemoTypes = 8

// namesEntry is a list of resource_names as encoded (its fields, tags
// included) and as decoded. Read-only: shared by streams and requests.
type namesEntry struct {
	raw   string
	names []string
}

// namesTable shares entries between streams, whose clients mostly subscribe
// with the same list; it forgets them all past maxTableBytes (streams keep
// theirs).
type namesTable struct {
	mu    sync.Mutex
	m     map[string]*namesEntry // guarded by mu; by raw
	bytes int                    // guarded by mu: the raw bytes in m
}

const maxTableBytes = 4 << 20

// namesField is the field number of DiscoveryRequest.resource_names.
const namesField = 3

// unmarshal decodes b into r exactly as proto.Unmarshal does; when b's
// resource_names fields are the same bytes as in the last request of its
// type, it decodes the other fields only and reuses the names decoded then.
// Anything else (names fields not in one run, a new list, malformed input)
// takes proto.Unmarshal, so errors are its own.
func (r *sotwRequest) unmarshal(b []byte) error {
	i, j, ok := namesSpan(b)
	if ok {
		rest := b[j:]
		if i > 0 {
			rest = append(append(make([]byte, 0, len(b)-(j-i)), b[:i]...), b[j:]...)
		}
		if proto.Unmarshal(rest, r.DiscoveryRequest) == nil {
			if e := r.memo.lookup(r.GetTypeUrl()); e != nil && e.raw == string(b[i:j]) {
				r.ResourceNames = e.names
				return nil
			}
		}
	}
	if err := proto.Unmarshal(b, r.DiscoveryRequest); err != nil {
		return err
	}
	if ok {
		r.ResourceNames = r.memo.remember(r.GetTypeUrl(), b[i:j], r.ResourceNames)
	}
	return nil
}

// namesSpan returns where b's resource_names fields are when they are one
// run, b[i:j], as encoders write them; ok is false when there are none, they
// are split by other fields, or b is not well-formed.
func namesSpan(b []byte) (i, j int, ok bool) {
	i, j = -1, -1
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return 0, 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if m < 0 {
			return 0, 0, false
		}
		if num == namesField && typ == protowire.BytesType {
			if i < 0 {
				i = off
			} else if j != off {
				return 0, 0, false // split by another field
			}
			j = off + n + m
		}
		off += n + m
	}
	return i, j, i >= 0
}

func (m *namesMemo) lookup(typeURL string) *namesEntry {
	if m == nil {
		return nil
	}
	for _, t := range m.last {
		if t.typeURL == typeURL {
			return t.e
		}
	}
	return nil
}

// remember makes names, decoded from raw, the type's last list and returns
// the list to use (shared when another stream sent the same bytes). The
// returned slice has no spare capacity: an append never writes to it.
func (m *namesMemo) remember(typeURL string, raw []byte, names []string) []string {
	names = names[:len(names):len(names)]
	if m == nil {
		return names
	}
	e := m.table.intern(raw, names)
	typeURL = internType(typeURL)
	for k := range m.last {
		if m.last[k].typeURL == typeURL {
			m.last[k].e = e
			return e.names
		}
	}
	if len(m.last) == maxMemoTypes {
		m.last = append(m.last[:0], m.last[1:]...)
	}
	m.last = append(m.last, typedNames{typeURL: unique.Make(typeURL).Value(), e: e})
	return e.names
}

// intern returns the table's entry for raw, adding one for names if none.
func (t *namesTable) intern(raw []byte, names []string) *namesEntry {
	if t == nil {
		return &namesEntry{raw: string(raw), names: names}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[string(raw)]; ok {
		return e
	}
	if t.m == nil || t.bytes+len(raw) > maxTableBytes {
		t.m, t.bytes = make(map[string]*namesEntry), 0
	}
	e := &namesEntry{raw: string(raw), names: names}
	t.m[e.raw] = e
	t.bytes += len(raw)
	return e
}
