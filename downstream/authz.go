package downstream

import (
	"google.golang.org/grpc/codes"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
)

// principal builds the stream's authz.Principal. Called with mu held.
func (st *stream) principalLocked() *authz.Principal {
	if st.principal == nil {
		p := &authz.Principal{NodeID: st.nodeID, Cluster: st.cluster}
		p.SPIFFEID, p.URISANs, p.MTLS = tlsconfig.PeerIdentity(st.ss.Context())
		st.principal = p
	}
	return st.principal
}

// authorize removes from c what the stream may not subscribe to: denied
// names stay subscribed on the stream but unwatched, with a TP3
// PERMISSION_DENIED error that every response for them carries (c.Answer
// asks the Source for a response now). Called with mu held.
func (st *stream) authorize(ts *typeState, typeURL string, c Change) Change {
	for _, n := range c.Remove {
		delete(ts.denied, n)
	}
	ts.wildcardDenied = false
	az := st.srv.opts.Authorize
	if az == nil {
		return c
	}
	p := st.principalLocked()
	allowed := c.Add[:0:0]
	for _, n := range c.Add {
		if err := az(p, typeURL, n); err != nil {
			if ts.denied == nil {
				ts.denied = make(map[string]*ResourceError)
			}
			ts.denied[n] = &ResourceError{Name: n, Code: codes.PermissionDenied, Message: err.Error()}
			c.Answer = append(c.Answer, n)
			st.denied(typeURL, n, err)
			continue
		}
		allowed = append(allowed, n)
	}
	c.Add = allowed
	if c.Wildcard != nil && *c.Wildcard {
		if err := az(p, typeURL, keying.Wildcard); err != nil {
			// No resource to attach the error to: the stream ends with it.
			ts.wildcardDenied = true
			st.denied(typeURL, keying.Wildcard, err)
		}
	}
	return c
}

func (st *stream) denied(typeURL, name string, err error) {
	st.srv.m.RejectedRequests.WithLabelValues("permission_denied").Inc()
	st.srv.log.Info("subscription denied", zap.Uint64("stream", st.id), zap.String("node", st.nodeID), zap.String("type", typeURL),
		zap.String("name", name), zap.Error(err))
}

// errorFor returns the error a response carries for name: the stream's own
// denial first, then the View's.
func (ts *typeState) errorFor(v *View, name string) (*ResourceError, bool) {
	if e, ok := ts.denied[name]; ok {
		return e, true
	}
	if _, present := v.Resources[name]; present {
		return nil, false // a transient error while the cached resource serves
	}
	e, ok := v.Errors[name]
	return e, ok
}
