// Package tlsconfig builds the relay's downstream TLS from PEM files and keeps
// it current, and reads a client's identity from a verified certificate.
//
// ServerCredentials serves TLS (mTLS with a client CA) over grpc's pemfile
// certificate provider — gRPC's "file_watcher", the same one its xDS
// bootstrap uses for tls channel credentials (gRFC A65) — which re-reads the
// files every refresh interval; every handshake uses the material of that
// moment. Established connections keep the material they were set up with.
// A re-read that fails (a file missing, half written, or a key that does not
// match its certificate, as between the writes of a non-atomic rotation)
// keeps the last good material: a rotation may write the files in any order.
// The upstream side uses gRPC's own bootstrap credentials (see relay).
//
// LoadKeyPair and LoadPool read the files once with errors that name the
// file at fault (config validation uses them), and PeerIdentity reads a
// verified client certificate's SPIFFE ID (parsed by go-spiffe) and URI SANs
// from a gRPC server context.
//
// The package keeps no global state; the provider behind ServerCredentials
// runs one goroutine until its close function is called.
package tlsconfig
