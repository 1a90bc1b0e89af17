package upstream

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"

	// Register the standard envoy resource types, so that their Anys are
	// decoded in full before they are accepted.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
)

// Resource is one resource as the server sent it.
type Resource struct {
	// Name is the resource's name: the wrapper's name when the server wrapped
	// it in envoy.service.discovery.v3.Resource, else field 1 of the resource.
	Name string
	// Spelling is the name as the server wrote it when the Client reports
	// Name canonically and that differs (an xdstp name Envoy-spelled,
	// spelling.go); "" otherwise.
	Spelling string
	// Any is the resource itself, unwrapped from a Resource wrapper if there
	// was one. Any.Value holds the server's bytes, never re-marshalled. nil
	// only for a TTL heartbeat (Heartbeat is true).
	Any *anypb.Any
	// Version is the server's per-resource version in Delta; "" in SotW.
	Version string
	// TTL is the wrapper's ttl; 0 when none.
	TTL time.Duration
	// DoNotCache is the wrapper's cache_control.do_not_cache.
	DoNotCache bool
	// Heartbeat reports a TTL heartbeat: a wrapper without a resource, which
	// says that the named resource is unchanged and refreshes its TTL. A
	// SotW response of heartbeats only is not a full state (Removed stays
	// empty).
	Heartbeat bool
	// Constraints are the TP2 dynamic-parameter constraints of this variant
	// (the wrapper's resource_name); nil when it has none.
	Constraints *discoveryv3.DynamicParameterConstraints
}

// variantID identifies a resource variant within a response: its name, with
// the canonical form of its TP2 constraints when it has some.
func (r Resource) variantID() string {
	if r.Constraints == nil {
		return r.Name
	}
	return r.Name + "\x00" + keying.CanonicalConstraints(r.Constraints)
}

// Variant names one variant of a resource: TP2 removed_resource_names.
type Variant struct {
	Name        string
	Constraints *discoveryv3.DynamicParameterConstraints
}

// Event says what an Update stands for.
type Event int

const (
	// Response is an accepted response for a subscribed type.
	Response Event = iota
	// UnsubscribedRemoval carries only the removals of a Delta response for
	// a type no longer subscribed: the server's word on what the relay may
	// still cache.
	UnsubscribedRemoval
	// Settle has no response behind it: the server said nothing more for
	// a while after the relay's last request. It ends the wait for the
	// type's first answer on the stream and, with Unfound, the wildcard's:
	// silence is not the server's word, so it proves no set whole and
	// removes nothing (nothing else is set).
	Settle
)

// Update is one accepted response for one type from one server, or another
// event of the server's stream (Event).
type Update struct {
	// Event says what the update stands for.
	Event Event
	// Server is the URI of the server that sent the response.
	Server string
	// TypeURL is the response's type URL.
	TypeURL string
	// Resources are the resources of the response, in the server's order.
	Resources []Resource
	// Removed lists deleted names. Delta: removed_resources. SotW LDS/CDS:
	// the names received in an earlier response (and subscribed, or covered
	// by the wildcard, ever since) that this full-state response omits —
	// judged by what the client knew, never by subscriptions the response
	// may not answer yet. Sorted for SotW, in the server's order for Delta.
	Removed []string
	// Keys, with a SotW LDS/CDS response, are the subscribed TP2 keys (name
	// and parameters) the response answers: one whose name has variants in
	// it but none that matches is not there. Other keys may be answered by a
	// later response only. With them, the plain names it answers (those
	// Removed is judged by).
	Keys map[string]struct{}
	// Globs, with a SotW LDS/CDS response, are the glob collections it
	// answers whole (they were in the stream's first request): a member of
	// one that it lacks is deleted, whatever the client knew of it. With a
	// Delta response, the first of the type on its stream, they are those
	// of the stream's first request: the response is the server's word on
	// their sets (what the request declared, changed by the response).
	Globs []string
	// Complete reports that the response answers the wildcard subscription:
	// with it the relay holds the default authority's whole set of the type
	// (SotW: it is that set). Only when that is certain; see settle.go.
	Complete bool
	// Unfound, with a Settle, reports that the wildcard subscription
	// settled by the server's silence: what of the default authority's set
	// the relay lacks is not found yet — not gone (downstream.View.Unfound).
	Unfound bool
	// Delta reports an incremental response.
	Delta bool
	// RemovedVariants are Delta's removed_resource_names: variants deleted.
	RemovedVariants []Variant
	// Errors are the response's TP3 resource_errors.
	Errors []ResourceError
}

// ResourceError is one TP3 per-resource error the server sent.
type ResourceError struct {
	Name    string
	Code    codes.Code
	Message string
	// Constraints are the TP2 constraints of the variant the error is for;
	// nil: the name.
	Constraints *discoveryv3.DynamicParameterConstraints
}

// resourceErrors converts a response's resource_errors.
func resourceErrors(errs []*discoveryv3.ResourceError) []ResourceError {
	if len(errs) == 0 {
		return nil
	}
	out := make([]ResourceError, 0, len(errs))
	for _, e := range errs {
		if n := e.GetResourceName().GetName(); n != "" {
			out = append(out, ResourceError{Name: n, Code: codes.Code(e.GetErrorDetail().GetCode()),
				Message: e.GetErrorDetail().GetMessage(), Constraints: e.GetResourceName().GetDynamicParameterConstraints()})
		}
	}
	return out
}

// Handler receives what the upstream sends. Its methods are called from the
// Client's goroutines, one call at a time.
type Handler interface {
	// OnUpdate is called for every event of a server's stream (Event): each
	// valid response of a subscribed type, the removals of one for a type no
	// longer subscribed, and a type's settle — in the order they happened. A
	// non-nil error NACKs a Response with the error's text; the update must
	// then be treated as not applied.
	OnUpdate(u Update) error
	// OnState reports connection changes: connected to server, or
	// disconnected from it with the cause.
	OnState(server string, connected bool, err error)
}

var errNoName = errors.New("resource has no name")

// decodeSotW validates the resources of a SotW response and converts them.
// Any error is a reason to NACK the response (xDS: the client rejects the
// whole response).
func decodeSotW(resp *discoveryv3.DiscoveryResponse) ([]Resource, error) {
	typeURL := resp.GetTypeUrl()
	out := make([]Resource, 0, len(resp.GetResources()))
	seen := make(map[string]struct{}, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		var (
			r   Resource
			err error
		)
		if a.GetTypeUrl() == keying.ResourceWrapperType && typeURL != keying.ResourceWrapperType {
			w := &discoveryv3.Resource{}
			if err := proto.Unmarshal(a.GetValue(), w); err != nil {
				return nil, fmt.Errorf("upstream: resource %d: decode %s: %w", i, keying.ResourceWrapperType, err)
			}
			r, err = fromWrapper(typeURL, w)
			r.Version = "" // SotW: the response's version_info is the version.
		} else {
			r, err = fromAny(typeURL, a)
		}
		if err != nil {
			return nil, fmt.Errorf("upstream: resource %d: %w", i, err)
		}
		if _, dup := seen[r.variantID()]; dup {
			return nil, fmt.Errorf("upstream: resource %d: duplicate name %q", i, r.Name)
		}
		seen[r.variantID()] = struct{}{}
		out = append(out, r)
	}
	return out, nil
}

// decodeDelta validates the resources of a Delta response and converts them.
func decodeDelta(resp *discoveryv3.DeltaDiscoveryResponse) ([]Resource, error) {
	typeURL := resp.GetTypeUrl()
	out := make([]Resource, 0, len(resp.GetResources()))
	seen := make(map[string]struct{}, len(resp.GetResources()))
	for i, w := range resp.GetResources() {
		r, err := fromWrapper(typeURL, w)
		if err != nil {
			return nil, fmt.Errorf("upstream: resource %d: %w", i, err)
		}
		if _, dup := seen[r.variantID()]; dup {
			return nil, fmt.Errorf("upstream: resource %d: duplicate name %q", i, r.Name)
		}
		seen[r.variantID()] = struct{}{}
		out = append(out, r)
	}
	return out, nil
}

// fromWrapper unwraps an envoy.service.discovery.v3.Resource.
func fromWrapper(typeURL string, w *discoveryv3.Resource) (Resource, error) {
	if w == nil {
		return Resource{}, errors.New("empty Resource wrapper")
	}
	r := Resource{
		Name:       w.GetName(),
		Version:    w.GetVersion(),
		TTL:        w.GetTtl().AsDuration(),
		DoNotCache: w.GetCacheControl().GetDoNotCache(),
	}
	if rn := w.GetResourceName(); rn != nil {
		if r.Name != "" {
			return Resource{}, errors.New("Resource wrapper has both name and resource_name")
		}
		r.Name, r.Constraints = rn.GetName(), rn.GetDynamicParameterConstraints()
	}
	if w.GetResource() == nil {
		// xDS TTL: a wrapper without a resource is a heartbeat.
		if r.Name == "" {
			return Resource{}, errNoName
		}
		r.Heartbeat = true
		return r, nil
	}
	inner, err := fromAny(typeURL, w.GetResource())
	if err != nil {
		return Resource{}, err
	}
	r.Any = inner.Any
	if r.Name == "" {
		r.Name = inner.Name
	}
	return r, nil
}

// fromAny checks one (unwrapped) resource: its type URL must be the
// response's, it must decode, and it must have a name.
func fromAny(typeURL string, a *anypb.Any) (Resource, error) {
	if a == nil {
		return Resource{}, errors.New("empty resource")
	}
	if a.GetTypeUrl() != typeURL {
		return Resource{}, fmt.Errorf("type_url %q does not match the response type_url %q", a.GetTypeUrl(), typeURL)
	}
	name, err := resourceName(a.GetValue())
	if err != nil {
		return Resource{}, fmt.Errorf("decode %s: %w", typeURL, err)
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL); err == nil {
		if err := proto.Unmarshal(a.GetValue(), mt.New().Interface()); err != nil {
			return Resource{}, fmt.Errorf("decode %s: %w", typeURL, err)
		}
	}
	if name == "" {
		return Resource{}, errNoName
	}
	return Resource{Name: name, Any: a}, nil
}

// resourceName returns field 1 (a string) of an encoded resource, checking
// on the way that the bytes are well-formed protobuf wire format. Field 1 is
// the name of every standard envoy resource (ClusterLoadAssignment's
// cluster_name included), and reading it from the wire works for types this
// binary does not know.
func resourceName(b []byte) (string, error) {
	var name string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			name = string(v) // proto: the last occurrence wins
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return name, nil
}

// resourceNames returns the names of rs.
func resourceNames(rs []Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}
