package keying

import "strings"

// Well-known xDS v3 resource type URLs. Any other type URL is relayed too; these
// are named because the protocol treats some of them specially.
const (
	typePrefix = "type.googleapis.com/"

	ListenerType        = typePrefix + "envoy.config.listener.v3.Listener"
	RouteType           = typePrefix + "envoy.config.route.v3.RouteConfiguration"
	ScopedRouteType     = typePrefix + "envoy.config.route.v3.ScopedRouteConfiguration"
	VirtualHostType     = typePrefix + "envoy.config.route.v3.VirtualHost"
	ClusterType         = typePrefix + "envoy.config.cluster.v3.Cluster"
	EndpointType        = typePrefix + "envoy.config.endpoint.v3.ClusterLoadAssignment"
	SecretType          = typePrefix + "envoy.extensions.transport_sockets.tls.v3.Secret"
	RuntimeType         = typePrefix + "envoy.service.runtime.v3.Runtime"
	ExtensionConfigType = typePrefix + "envoy.config.core.v3.TypedExtensionConfig"

	// ResourceWrapperType is envoy.service.discovery.v3.Resource, which a SotW
	// server may use to wrap resources (TTL, cache control, TP2 names).
	ResourceWrapperType = typePrefix + "envoy.service.discovery.v3.Resource"
)

// Wildcard is the explicit wildcard subscription name.
const Wildcard = "*"

// Key identifies one cached resource variant. It is comparable and used as a map key.
type Key struct {
	TypeURL string
	// Name is the resource's canonical name: a legacy name untouched, or an
	// xdstp:// URN in canonical form.
	Name string
	// Constraints is the canonical form of the TP2 dynamic-parameter
	// constraints of this variant; empty when the variant has none.
	Constraints string
}

// String formats k for logs and debug output.
func (k Key) String() string {
	s := k.TypeURL + " " + k.Name
	if k.Constraints != "" {
		s += " {" + k.Constraints + "}"
	}
	return s
}

// FullState reports whether SotW responses of typeURL must carry every
// subscribed resource (xDS: Listener and Cluster); for every other type a
// response may carry just what changed.
func FullState(typeURL string) bool {
	return typeURL == ListenerType || typeURL == ClusterType
}

// WildcardCapable reports whether typeURL supports wildcard subscriptions
// (xDS: Listener and Cluster, by "*" or the legacy empty first request).
func WildcardCapable(typeURL string) bool { return FullState(typeURL) }

// ValidTypeURL reports whether s looks like a protobuf type URL
// ("type.googleapis.com/pkg.Message" or any "host/pkg.Message").
func ValidTypeURL(s string) bool {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 || len(s) > 512 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// ShortType returns the last element of a type URL, for people and filters:
// "Cluster" for "type.googleapis.com/envoy.config.cluster.v3.Cluster".
func ShortType(typeURL string) string { return typeURL[strings.LastIndexAny(typeURL, "./")+1:] }

// Authority returns the decoded authority of an xdstp:// name and true, or ""
// and false for a name without the "xdstp://" prefix. It reads only the
// authority, as ParseURN does (up to the first '/', '?' or '#'), without
// validating the rest; a malformed percent-escape there is returned as written
// (Canonical reports the error).
func Authority(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, urnPrefix)
	if !ok {
		return "", false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if a, err := unescape(rest); err == nil {
		return a, true
	}
	return rest, true
}

// GlobOf returns the glob collection an xdstp resource name is a direct
// member of ("xdstp://a/T/foo/bar?k=v" → "xdstp://a/T/foo/*?k=v"), or "" for
// legacy names, globs and names that do not parse.
func GlobOf(name string) string {
	if !IsXDSTP(name) {
		return ""
	}
	u, err := ParseURN(name)
	if err != nil || u.IsGlob() {
		return ""
	}
	return u.Glob().String()
}

// paramSep separates a subscription key's name from its dynamic parameters.
// It cannot be confused with a name in practice (xDS names are printable).
const paramSep = "\x00"

// SubscriptionKey is the relay's key for a subscription to name with TP2
// dynamic parameters (canonical, from CanonicalParams): the name itself when
// there are none, so that a plain name and a locator without parameters are
// one subscription. Subscriptions with equal keys are one cache entry and
// one upstream subscription.
func SubscriptionKey(name, params string) string {
	if params == "" {
		return name
	}
	return name + paramSep + params
}

// NodeSubscriptionKey is the subscription key of a canonical name subscribed
// without a resource locator by a client whose node gives the canonical
// dynamic parameters nodeParams (keying.dynamic_parameters_from_node). The
// wildcard and glob collections take no parameters from the node.
func NodeSubscriptionKey(name, nodeParams string) string {
	if nodeParams == "" || name == "" || name == Wildcard || IsGlob(name) {
		return name
	}
	return SubscriptionKey(name, nodeParams)
}

// HasParams reports whether a subscription key carries dynamic parameters.
func HasParams(key string) bool { return strings.Contains(key, paramSep) }

// SplitSubscriptionKey returns the name and the canonical parameters of a
// key made by SubscriptionKey.
func SplitSubscriptionKey(key string) (name, params string) {
	name, params, _ = strings.Cut(key, paramSep)
	return name, params
}

// DisplayKey formats a subscription key for people: "name{k=v&…}".
func DisplayKey(key string) string {
	if name, params := SplitSubscriptionKey(key); params != "" {
		return name + "{" + params + "}"
	}
	return key
}
