package downstream

import (
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// Client features (Node.client_features) that change how resources are
// wrapped: xDS TTL.
const (
	featureTTL          = "xds.config.supports-resource-ttl"
	featureSotWResource = "xds.config.supports-resource-in-sotw"
)

// wrap is how a stream's responses carry resources: tp2 holds the keys it
// subscribed with a TP2 locator (sent with resource_name and constraints);
// ttl says that it supports TTLs (on SotW also resources wrapped in
// Resource), so resources the upstream gave a TTL carry it.
type wrap struct {
	tp2 map[string]struct{}
	ttl bool
}

// form is how one resource is wrapped in an envoy.service.discovery.v3.Resource.
type form uint8

const (
	formTP2  form = 1 << iota // resource_name {name, constraints} instead of name
	formTTL                   // with its ttl
	formBeat                  // a TTL heartbeat: no resource
	formAny                   // inside a google.protobuf.Any, as SotW carries it
)

// formOf returns how w wraps r (0: SotW sends r as its own Any; Delta as a
// plain Resource).
func (w wrap) formOf(r *Resource) form {
	var f form
	if _, ok := w.tp2[r.key()]; ok {
		f |= formTP2
	}
	if w.ttl && r.TTL > 0 {
		f |= formTTL
	}
	return f
}

// mark writes, into a memo key, how w wraps r: responses encoded for
// streams that wrap differently are not shared.
func (w wrap) mark(sb *strings.Builder, r *Resource) {
	f := w.formOf(r)
	if f&formTP2 != 0 {
		sb.WriteByte(1)
	}
	if f&formTTL != 0 {
		sb.WriteByte(2)
	}
}

// encodings are a stored variant's wrapped forms, encoded on first use.
type encodings struct {
	mu  sync.Mutex
	enc map[form][]byte
}

// wrapper returns r wrapped in form f, encoded once per stored variant and
// form: Resource{version, resource (unless a heartbeat), name or
// resource_name, ttl}, as an Any with formAny.
func (r *Resource) wrapper(f form) []byte {
	r = r.Root()
	r.encodings.mu.Lock()
	defer r.encodings.mu.Unlock()
	if b, ok := r.encodings.enc[f]; ok {
		return b
	}
	var b []byte
	b = protowire.AppendTag(b, resourceVersion, protowire.BytesType)
	b = protowire.AppendString(b, r.Version)
	if f&formBeat == 0 {
		b = protowire.AppendTag(b, resourceBody, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Any)
	}
	if f&formTP2 != 0 {
		b = protowire.AppendTag(b, resourceTP2Name, protowire.BytesType)
		b = protowire.AppendBytes(b, r.resourceName())
	} else {
		b = protowire.AppendTag(b, resourceName, protowire.BytesType)
		b = protowire.AppendString(b, r.sentName())
	}
	if f&formTTL != 0 && r.TTL > 0 {
		b = protowire.AppendTag(b, resourceTTL, protowire.BytesType)
		b = protowire.AppendBytes(b, durationBytes(r.TTL))
	}
	if f&formAny != 0 {
		var a []byte
		a = protowire.AppendTag(a, 1, protowire.BytesType)
		a = protowire.AppendString(a, keying.ResourceWrapperType)
		a = protowire.AppendTag(a, 2, protowire.BytesType)
		b = protowire.AppendBytes(a, b)
	}
	if r.encodings.enc == nil {
		r.encodings.enc = make(map[form][]byte, 1)
	}
	r.encodings.enc[f] = b
	return b
}

// durationBytes encodes a google.protobuf.Duration.
func durationBytes(d time.Duration) []byte {
	var b []byte
	if s := int64(d / time.Second); s != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s))
	}
	if n := int32(d % time.Second); n != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	return b
}

// resourceName encodes the variant's ResourceName{name, constraints}.
func (r *Resource) resourceName() []byte {
	return encodeResourceName(r.sentName(), r.ConstraintsWire)
}

func encodeResourceName(name string, constraints []byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	if constraints != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, constraints)
	}
	return b
}
