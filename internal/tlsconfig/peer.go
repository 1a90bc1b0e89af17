package tlsconfig

import (
	"context"
	"crypto/tls"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// PeerIdentity returns the identity of the client of a gRPC server call (ctx
// is the call's or the stream's context) from the certificate it presented:
// ok is true only when the connection is TLS and the client's certificate was
// verified (a server with a client CA, i.e. mTLS). uriSANs are the leaf's URI
// SANs as written; spiffeID is the SPIFFE ID, set when the leaf is an
// X.509-SVID: exactly one URI SAN, a well-formed spiffe:// ID (go-spiffe's
// x509svid.IDFromCert).
func PeerIdentity(ctx context.Context) (spiffeID string, uriSANs []string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found || p.AuthInfo == nil {
		return "", nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS {
		return "", nil, false
	}
	return StateIdentity(&info.State)
}

// StateIdentity is PeerIdentity for a connection's TLS state (an HTTP
// server's Request.TLS; nil for plaintext).
func StateIdentity(state *tls.ConnectionState) (spiffeID string, uriSANs []string, ok bool) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.PeerCertificates) == 0 {
		return "", nil, false
	}
	leaf := state.PeerCertificates[0]
	for _, u := range leaf.URIs {
		uriSANs = append(uriSANs, u.String())
	}
	if id, err := x509svid.IDFromCert(leaf); err == nil {
		spiffeID = id.String()
	}
	return spiffeID, uriSANs, true
}
