package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

// SecretMaterialType carries private keys: served under the authorization
// rules of secrets. StatusReportType is what a ReportStatus call is
// authorized for (with the node id as the name).
const (
	SecretMaterialType = controlv1.SecretMaterialType
	StatusReportType   = controlv1.StatusReportType
)

// Field numbers of the messages the relay reads and writes as bytes.
const (
	// DiscoveryResponse
	respVersion  = 1
	respNonce    = 2
	respSnapshot = 3
	// DeltaDiscoveryResponse
	deltaSystemVersion  = 1
	deltaNonce          = 2
	deltaTypeURL        = 3
	deltaResources      = 4
	deltaRemoved        = 5
	deltaNonIncremental = 6
	// Resource
	resourceName    = 1
	resourceVersion = 2
	resourceBody    = 3
	// google.protobuf.Any
	anyTypeURL = 1
)

// raw receives any message keeping its bytes: every field of an Empty is
// unknown, and unknown fields are kept as they came.
type raw = emptypb.Empty

func rawBytes(m *raw) []byte { return m.ProtoReflect().GetUnknown() }

// snapshotResponse is an upstream DiscoveryResponse with its snapshot kept
// as the upstream's bytes.
type snapshotResponse struct {
	version, nonce string
	snapshot       []byte
}

// parseResponse reads a DiscoveryResponse. The snapshot must be a
// well-formed message; its contents are not decoded.
func parseResponse(b []byte) (snapshotResponse, error) {
	var r snapshotResponse
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case respVersion, respNonce, respSnapshot:
			if typ != protowire.BytesType {
				return fmt.Errorf("field %d has wire type %d", num, typ)
			}
		}
		switch num {
		case respVersion:
			r.version = string(v)
		case respNonce:
			r.nonce = string(v)
		case respSnapshot:
			if err := wellFormed(v); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			r.snapshot = v
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if r.version == "" {
		return r, errors.New("no version")
	}
	if r.snapshot == nil {
		r.snapshot = []byte{}
	}
	return r, nil
}

// encodeSnapshotBody encodes a DiscoveryResponse without its nonce: every
// stream of a group sends these bytes with its own nonce (field 2) after
// them.
func encodeSnapshotBody(version string, snapshot []byte) []byte {
	b := make([]byte, 0, len(version)+len(snapshot)+16)
	b = protowire.AppendTag(b, respVersion, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, respSnapshot, protowire.BytesType)
	return protowire.AppendBytes(b, snapshot)
}

// resource is one cached resource of a Delta group: its name, version and
// the upstream's encoded Resource message. Immutable.
type resource struct {
	name, version string
	raw           []byte
}

// deltaResponse is an upstream DeltaDiscoveryResponse with its resources
// kept as the upstream's bytes.
type deltaResponse struct {
	systemVersion, nonce, typeURL string
	resources                     []*resource
	removed                       []string
	nonIncremental                bool
}

// parseDeltaResponse reads a DeltaDiscoveryResponse and checks what a data
// plane relies on: a type, named resources (once each) whose body, when
// present, is of that type.
func parseDeltaResponse(b []byte) (deltaResponse, error) {
	var r deltaResponse
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == deltaNonIncremental {
			if typ != protowire.VarintType {
				return fmt.Errorf("field %d has wire type %d", num, typ)
			}
			r.nonIncremental = len(v) > 0 && v[0] != 0
			return nil
		}
		if num >= deltaSystemVersion && num <= deltaRemoved && typ != protowire.BytesType {
			return fmt.Errorf("field %d has wire type %d", num, typ)
		}
		switch num {
		case deltaSystemVersion:
			r.systemVersion = string(v)
		case deltaNonce:
			r.nonce = string(v)
		case deltaTypeURL:
			r.typeURL = string(v)
		case deltaResources:
			res, anyType, err := parseResource(v)
			if err != nil {
				return fmt.Errorf("resources[%d]: %w", len(r.resources), err)
			}
			if anyType != "" && r.typeURL != "" && anyType != r.typeURL {
				return fmt.Errorf("resource %q is a %s in a %s response", res.name, anyType, r.typeURL)
			}
			r.resources = append(r.resources, res)
		case deltaRemoved:
			r.removed = append(r.removed, string(v))
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if r.typeURL == "" {
		return r, errors.New("no type_url")
	}
	seen := make(map[string]bool, len(r.resources))
	for _, res := range r.resources {
		if seen[res.name] {
			return r, fmt.Errorf("resource %q twice", res.name)
		}
		seen[res.name] = true
	}
	return r, nil
}

// parseResource reads a Resource's name, version and body type.
func parseResource(b []byte) (*resource, string, error) {
	res := &resource{raw: b}
	anyType := ""
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num <= resourceBody && typ != protowire.BytesType {
			return fmt.Errorf("field %d has wire type %d", num, typ)
		}
		switch num {
		case resourceName:
			res.name = string(v)
		case resourceVersion:
			res.version = string(v)
		case resourceBody:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == anyTypeURL && typ == protowire.BytesType {
					anyType = string(v)
				}
				return nil
			})
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, "", err
	case res.name == "":
		return nil, "", errors.New("a resource without a name")
	case res.version == "":
		return nil, "", fmt.Errorf("resource %q without a version", res.name)
	}
	return res, anyType, nil
}

// encodeDeltaBody encodes a DeltaDiscoveryResponse without its nonce.
func encodeDeltaBody(systemVersion, typeURL string, send []*resource, removed []string) []byte {
	n := len(systemVersion) + len(typeURL) + 8
	for _, r := range send {
		n += len(r.raw) + 6
	}
	for _, name := range removed {
		n += len(name) + 4
	}
	b := make([]byte, 0, n)
	b = protowire.AppendTag(b, deltaSystemVersion, protowire.BytesType)
	b = protowire.AppendString(b, systemVersion)
	b = protowire.AppendTag(b, deltaTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	for _, r := range send {
		b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r.raw)
	}
	for _, name := range removed {
		b = protowire.AppendTag(b, deltaRemoved, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	return b
}

// eachField calls f for every field of a message: bytes fields with their
// value, varints with their encoding, other types with their raw value.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = val, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// wellFormed checks that b parses as protobuf fields (nested messages are
// not told apart from bytes on the wire; their bytes are not walked).
func wellFormed(b []byte) error {
	return eachField(b, func(protowire.Number, protowire.Type, []byte) error { return nil })
}

// maxInitialNames bounds the names of one type in initial_resource_versions.
const maxInitialNames = 100000

// parseInitialVersions decodes initial_resource_versions: per type URL a
// JSON object of resource name → version.
func parseInitialVersions(m map[string]string) (map[string]map[string]string, error) {
	out := make(map[string]map[string]string, len(m))
	for _, t := range slices.Sorted(maps.Keys(m)) {
		var vs map[string]string
		if err := json.Unmarshal([]byte(m[t]), &vs); err != nil {
			return nil, fmt.Errorf("initial_resource_versions[%q]: not a JSON object of name → version: %w", t, err)
		}
		if len(vs) > maxInitialNames {
			return nil, fmt.Errorf("initial_resource_versions[%q]: %d names, the limit is %d", t, len(vs), maxInitialNames)
		}
		out[t] = vs
	}
	return out, nil
}

// encodeInitialVersions encodes the versions a cache holds as
// initial_resource_versions.
func encodeInitialVersions(types map[string]map[string]string) map[string]string {
	out := make(map[string]string, len(types))
	for t, vs := range types {
		b, _ := json.Marshal(vs) // a map of strings always encodes
		out[t] = string(b)
	}
	return out
}
