// Package tlsconfig builds the relay's TLS configurations from PEM files and
// keeps them current: a certificate, its key and a CA bundle are re-read when
// the files change, without dropping any connection.
//
// A Source names the files. Its ServerConfig returns a *tls.Config whose
// GetConfigForClient reads the current material at every handshake;
// ClientCredentials builds a client configuration (ClientConfig) for every
// handshake. Reading the current material stats the files and reloads those
// whose inode, size or modification time changed. Established
// connections keep the material they were set up with; new handshakes use the
// new files. A reload that fails (a file missing, half written, or a key that
// does not match its certificate, as happens between the writes of a
// non-atomic rotation) is logged once and the last good material stays in
// use, so a rotation may write the files in any order.
//
// ServerCredentials and ClientCredentials wrap the configurations as gRPC
// transport credentials, and PeerIdentity reads a verified client
// certificate's SPIFFE ID and URI SANs from a gRPC server context.
//
// The package keeps no global state and starts no goroutines. All methods of
// Source are safe for concurrent use.
package tlsconfig
