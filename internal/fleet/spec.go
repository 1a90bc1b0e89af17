package fleet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/keying"
)

// Style selects the shape of the generated listeners.
type Style string

const (
	// StyleEnvoy generates socket listeners with an HttpConnectionManager network filter.
	StyleEnvoy Style = "envoy"
	// StyleGRPC generates proxyless-gRPC api_listeners.
	StyleGRPC Style = "grpc"
)

// ParseStyle parses "envoy" or "grpc".
func ParseStyle(s string) (Style, error) {
	switch Style(s) {
	case StyleEnvoy, StyleGRPC:
		return Style(s), nil
	}
	return "", fmt.Errorf("fleet: unknown style %q (want envoy or grpc)", s)
}

// Kind is one of the four resource types a fleet is made of.
type Kind int

// The resource kinds, in the order a proxyless gRPC client resolves them.
const (
	Listeners Kind = iota
	Routes
	Clusters
	Endpoints
	numKinds
)

// Kinds lists every Kind in order.
var Kinds = [numKinds]Kind{Listeners, Routes, Clusters, Endpoints}

var kindNames = [numKinds]string{"lds", "rds", "cds", "eds"}

var kindURLs = [numKinds]string{
	resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType,
}

// String returns the short xDS name: lds, rds, cds or eds.
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// TypeURL returns the v3 type URL of the kind's resources.
func (k Kind) TypeURL() string { return kindURLs[k] }

// KindOf returns the Kind whose TypeURL is typeURL.
func KindOf(typeURL string) (Kind, bool) {
	for k, u := range kindURLs {
		if u == typeURL {
			return Kind(k), true
		}
	}
	return 0, false
}

// ParseKinds parses a list of kinds separated by ',' or '|' ("cds,eds"); each
// kind is lds, rds, cds or eds. Duplicates are dropped.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	seen := map[Kind]bool{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '|' }) {
		part = strings.ToLower(strings.TrimSpace(part))
		k := Kind(-1)
		for i, n := range kindNames {
			if n == part {
				k = Kind(i)
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("fleet: unknown resource type %q (want lds, rds, cds or eds)", part)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("fleet: empty resource type list %q", s)
	}
	return out, nil
}

// Spec describes a generated fleet. The zero value is not valid; see Validate.
type Spec struct {
	// Listeners is the number of listeners (at least 1).
	Listeners int
	// Routes is the number of route configurations (at least 1).
	Routes int
	// Clusters is the number of clusters and ClusterLoadAssignments (at least 1).
	Clusters int
	// EndpointsPerCluster is the number of endpoints in each ClusterLoadAssignment (at least 1).
	EndpointsPerCluster int
	// Style selects envoy or grpc listeners; empty means StyleEnvoy.
	Style Style
	// Authority, when set, names every resource as an xdstp:// URN of that
	// authority (xDS federation): xdstp://AUTHORITY/TYPE/listener-0, where
	// TYPE is the resource type without the type.googleapis.com/ prefix.
	Authority string
}

// Limits checked by Validate.
const (
	maxListeners = 50000   // envoy listeners get ports 10000+i
	maxItems     = 1 << 22 // clusters, routes, endpoints: keeps addresses unique in 10.0.0.0/8
)

// Validate reports the first invalid field.
func (s Spec) Validate() error {
	switch {
	case s.Listeners < 1 || s.Listeners > maxListeners:
		return fmt.Errorf("fleet: listeners %d out of range [1, %d]", s.Listeners, maxListeners)
	case s.Routes < 1 || s.Routes > maxItems:
		return fmt.Errorf("fleet: routes %d out of range [1, %d]", s.Routes, maxItems)
	case s.Clusters < 1 || s.Clusters > maxItems:
		return fmt.Errorf("fleet: clusters %d out of range [1, %d]", s.Clusters, maxItems)
	case s.EndpointsPerCluster < 1 || s.Clusters*s.EndpointsPerCluster > 1<<24-2:
		return fmt.Errorf("fleet: endpoints-per-cluster %d out of range (at least 1, at most %d endpoints in all)",
			s.EndpointsPerCluster, 1<<24-2)
	case s.Style != "" && s.Style != StyleEnvoy && s.Style != StyleGRPC:
		return fmt.Errorf("fleet: unknown style %q", s.Style)
	case strings.ContainsAny(s.Authority, "/?#"):
		return fmt.Errorf("fleet: authority %q holds a URI delimiter", s.Authority)
	}
	return nil
}

// Count returns the number of resources of kind k.
func (s Spec) Count(k Kind) int {
	switch k {
	case Listeners:
		return s.Listeners
	case Routes:
		return s.Routes
	case Clusters, Endpoints:
		return s.Clusters
	}
	return 0
}

// Name returns the name of resource i of kind k: the legacy name, or its
// xdstp:// URN when the Spec has an Authority. Every reference between the
// fleet's resources uses these names.
func (s Spec) Name(k Kind, i int) string {
	var n string
	switch k {
	case Listeners:
		n = ListenerName(i)
	case Routes:
		n = RouteName(i)
	default:
		n = ClusterName(i)
	}
	if s.Authority == "" {
		return n
	}
	return "xdstp://" + s.Authority + "/" + strings.TrimPrefix(k.TypeURL(), "type.googleapis.com/") + "/" + n
}

// ListenerName returns the name of listener i.
func ListenerName(i int) string { return "listener-" + strconv.Itoa(i) }

// RouteName returns the name of route configuration j.
func RouteName(j int) string { return "route-" + strconv.Itoa(j) }

// ClusterName returns the name of cluster k, which is also the name of its
// ClusterLoadAssignment (the EDS service name).
func ClusterName(k int) string { return "cluster-" + strconv.Itoa(k) }

// Variants are the xRFC TP2 variants of every resource of a fleet: one per
// value of Key, with the constraint Key=value. The zero value is none.
type Variants struct {
	Key    string
	Values []string
}

// ParseVariants parses "key=v1,v2,…"; "" is none.
func ParseVariants(s string) (Variants, error) {
	if s == "" {
		return Variants{}, nil
	}
	key, values, ok := strings.Cut(s, "=")
	v := Variants{Key: key, Values: strings.Split(values, ",")}
	if !ok {
		return Variants{}, fmt.Errorf("fleet: variants %q: want key=value,value,…", s)
	}
	return v, v.validate()
}

func (v Variants) validate() error {
	if len(v.Values) == 0 {
		return nil
	}
	if v.Key == "" {
		return errors.New("fleet: variants: empty key")
	}
	seen := map[string]bool{}
	for _, x := range v.Values {
		if x == "" || seen[x] {
			return fmt.Errorf("fleet: variants: empty or repeated value in %q", strings.Join(v.Values, ","))
		}
		seen[x] = true
	}
	return nil
}

// String formats v as ParseVariants reads it.
func (v Variants) String() string {
	if len(v.Values) == 0 {
		return ""
	}
	return v.Key + "=" + strings.Join(v.Values, ",")
}

// constraint is the TP2 constraint of the variant for value: Key=value.
func (v Variants) constraint(value string) *discoverypb.DynamicParameterConstraints {
	return keying.ValueConstraint(v.Key, value)
}
