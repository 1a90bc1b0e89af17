package downstream

import (
	"context"
	"errors"
	"io"
	"strings"
	"unique"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/keying"
)

// prelude checks what every request must satisfy before it touches the
// stream's state: a valid type URL and the stream's one node. It returns the
// request's type URL.
func (st *stream) prelude(typeURL string, node *corev3.Node) (string, error) {
	typeURL, err := st.checkType(typeURL)
	if err != nil {
		return "", err
	}
	if err := st.bind(node); err != nil {
		st.srv.m.RejectedRequests.WithLabelValues("node").Inc()
		return "", err
	}
	return typeURL, nil
}

// checkType returns the type URL a request is for, or a status error.
func (st *stream) checkType(typeURL string) (string, error) {
	switch {
	case st.typeURL == "" && typeURL == "":
		return "", st.reject("missing_type_url", codes.InvalidArgument, "type_url is required on ADS")
	case st.typeURL != "" && typeURL == "":
		return st.typeURL, nil
	case st.typeURL != "" && typeURL != st.typeURL:
		return "", st.reject("wrong_type_url", codes.InvalidArgument, "type_url %q on the %s service", typeURL, st.typeURL)
	case !keying.ValidTypeURL(typeURL):
		return "", st.reject("invalid_type_url", codes.InvalidArgument, "malformed type_url %q", typeURL)
	}
	return internType(typeURL), nil
}

// internType returns the shared copy of a well-known type URL, else
// typeURL: a stream keeps the URLs of its types for life, and each decoded
// request carries its own copy.
func internType(typeURL string) string {
	switch typeURL {
	case keying.ListenerType:
		return keying.ListenerType
	case keying.RouteType:
		return keying.RouteType
	case keying.ScopedRouteType:
		return keying.ScopedRouteType
	case keying.VirtualHostType:
		return keying.VirtualHostType
	case keying.ClusterType:
		return keying.ClusterType
	case keying.EndpointType:
		return keying.EndpointType
	case keying.SecretType:
		return keying.SecretType
	case keying.RuntimeType:
		return keying.RuntimeType
	case keying.ExtensionConfigType:
		return keying.ExtensionConfigType
	}
	return typeURL
}

// checkNames refuses names that cannot be subscription keys (the key
// separator inside a name would make it another name's parameters).
func (st *stream) checkNames(names []string, locs ...[]*discoverypb.ResourceLocator) error {
	bad := func(n string) error {
		return st.reject("malformed_name", codes.InvalidArgument, "resource name %q contains a NUL byte", n)
	}
	for _, n := range names {
		if strings.IndexByte(n, 0) >= 0 {
			return bad(n)
		}
	}
	for _, ls := range locs {
		for _, l := range ls {
			if strings.IndexByte(l.GetName(), 0) >= 0 {
				return bad(l.GetName())
			}
		}
	}
	return nil
}

// overLimit reports whether a request of ts's type that names n resources
// (subscribed and unsubscribed; never initial_resource_versions, what the
// client holds) and leaves the type at most typeNames subscribed names is
// over MaxNamesPerRequest or takes the stream over MaxSubscriptions. Such a
// request is refused for its type alone: its subscription change is ignored
// (its ACK or NACK still counts), the client keeps its previous
// subscription of the type, and the stream and its other types go on — an
// ADS stream carries every type, so ending it would punish them all. Each
// refusal is counted; the first of a stream is logged. Called with mu held.
func (st *stream) overLimit(ts *typeState, typeURL string, n, typeNames int) bool {
	reason, got, limit := "too_many_names", n, st.srv.opts.MaxNamesPerRequest
	if n <= limit {
		total := typeNames - len(ts.names)
		for _, o := range st.types {
			total += len(o.names)
		}
		reason, got, limit = "too_many_subscriptions", total, st.srv.opts.MaxSubscriptions
		if total <= limit {
			return false
		}
	}
	st.srv.m.RejectedRequests.WithLabelValues(reason).Inc()
	if !st.limitLogged {
		st.limitLogged = true
		st.srv.log.Warn("request over a limit: its subscription change is ignored, the stream goes on",
			zap.Uint64("stream", st.id), zap.String("node", st.nodeID), zap.String("type", typeURL),
			zap.String("reason", reason), zap.Int("names", got), zap.Int("limit", limit))
	}
	return true
}

// reject counts a request refused with a status and returns it.
func (st *stream) reject(reason string, code codes.Code, format string, args ...any) error {
	st.srv.m.RejectedRequests.WithLabelValues(reason).Inc()
	st.srv.log.Debug("request rejected", zap.Uint64("stream", st.id), zap.String("reason", reason))
	return status.Errorf(code, format, args...)
}

// commitment is what a request leaves to do once mu is released.
type commitment struct {
	typeURL string
	c       Change // the subscription change, authorized
	// wildcardDenied: the stream may not subscribe to the wildcard.
	wildcardDenied bool
	// droppedInflight: the type's unacknowledged responses were forgotten;
	// released: what the stream withheld may go now. Both schedule a flush.
	droppedInflight, released bool
}

// commitLocked applies the subscription change of a request to the
// stream's state: it authorizes it. Called with mu held; the caller then
// releases mu and calls finish.
func (st *stream) commitLocked(ts *typeState, typeURL string, c Change) commitment {
	out := commitment{typeURL: typeURL}
	if len(c.Remove) > 0 || c.Wildcard != nil {
		out.droppedInflight = !ts.wildcard && len(ts.names) == 0 && st.dropInflight(typeURL)
	}
	out.c = st.authorize(ts, typeURL, c)
	out.wildcardDenied = ts.wildcardDenied
	// Make before break: what the client stopped subscribing to no longer
	// withholds the removal of what it referred to.
	out.released = len(out.c.Remove) > 0 && st.releaseWithheld(typeURL)
	return out
}

// finish ends a request after commitLocked: it reports a canary's verdict
// and hands the change to the Source. An error ends the stream; its watches
// are dropped by close. Called without mu.
func (st *stream) finish(cm commitment, verdict canaryVerdict) error {
	if cm.droppedInflight {
		defer st.kick()
	}
	if cm.released {
		st.kick()
	}
	verdict.report(st)
	c := cm.c
	if c.Wildcard != nil && *c.Wildcard && cm.wildcardDenied {
		return st.reject("permission_denied", codes.PermissionDenied,
			"xds-relay: not allowed to subscribe to every %s", cm.typeURL)
	}
	if !c.empty() {
		st.srv.src.Watch(st, cm.typeURL, c)
	}
	return nil
}

// key returns the subscription key of a name the stream subscribes to
// without a locator: canonical, with the parameters derived from its node.
func (st *stream) key(name string) string {
	if name == "" || name == keying.Wildcard {
		return name
	}
	k := keying.NodeSubscriptionKey(canonical(name), st.params)
	if keying.HasParams(k) {
		k = unique.Make(k).Value() // many streams share it
	}
	return k
}

// locatorKey returns the subscription key of a TP2 resource locator.
func locatorKey(l *discoverypb.ResourceLocator) string {
	c := canonical(l.GetName())
	if c == keying.Wildcard || len(l.GetDynamicParameters()) == 0 {
		return c
	}
	return unique.Make(keying.SubscriptionKey(c, keying.CanonicalParams(l.GetDynamicParameters()))).Value()
}

// RecvErr maps the end of a request stream (the error of RecvMsg) to the
// handler's result: a client that closed its side or went away ends the
// stream cleanly.
func RecvErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}
