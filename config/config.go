// Package config is xds-relay's YAML configuration: the schema, its defaults
// (Default), the loader (Parse, Load) and the validation (Config.Validate).
//
// The loader decodes a file over Default, so a key absent from the file keeps
// its default; unknown keys are errors. Every error, from the loader or from
// Validate, names the offending field by its path in the file, e.g.
// "upstream.xds_servers[0].server_uri".
//
// The package holds no state; a *Config is a plain value that callers must not
// mutate while another goroutine reads it.
package config

import "time"

// Config is the whole relay configuration (see CONTRACT.md). The defaults
// documented on each field are those of Default; Parse decodes a file over
// them, so a field the file does not mention keeps its default.
type Config struct {
	// Listen is the downstream xDS gRPC address. Default ":18001".
	Listen string `yaml:"listen"`
	// Admin is the admin HTTP address. Default "127.0.0.1:9902"; "" disables it.
	Admin string `yaml:"admin"`
	// Node is the identity the relay presents to its upstreams.
	Node Node `yaml:"node"`
	// Upstream lists the authoritative control planes.
	Upstream Upstream `yaml:"upstream"`
	// Cache bounds the cache.
	Cache Cache `yaml:"cache"`
	// Limits protect the relay from clients.
	Limits Limits `yaml:"limits"`
	// TLS, when set, makes the downstream listener serve TLS (mTLS with a
	// client CA). nil: plaintext.
	TLS *TLS `yaml:"tls,omitempty"`

	// Keying splits clients into node groups, each with its own upstream
	// streams and cache. nil: one group for all.
	Keying *Keying `yaml:"keying,omitempty"`

	// Authorization limits what each client may subscribe to. nil: every
	// client may subscribe to everything but secrets, which are served over
	// mTLS only.
	Authorization *Authorization `yaml:"authorization,omitempty"`

	// Rollout, when set, rolls every changed resource out to a canary cohort
	// of its watchers first. nil: off.
	Rollout *Rollout `yaml:"rollout,omitempty"`

	// REST, when set, serves REST-JSON polling on its own HTTP listener
	// (see dialects.go). nil: off.
	REST *REST `yaml:"rest,omitempty"`
	// Gateway tunes the gateway.control.v1 dialect (see dialects.go). nil:
	// the defaults.
	Gateway *Gateway `yaml:"gateway,omitempty"`
}

// Rollout is the guarded rollout of changed resources.
type Rollout struct {
	// CanaryFraction of each resource's watchers get a change first (at
	// least one client). Default 0.1.
	CanaryFraction float64 `yaml:"canary_fraction"`
	// Hold is how long the others wait for the canaries' ACKs. Default 2s.
	Hold time.Duration `yaml:"hold"`
	// MaxNACKRatio: above this fraction of canaries NACKing, the rollout
	// halts and the others keep the last accepted version. Default 0.
	MaxNACKRatio float64 `yaml:"max_nack_ratio"`
}

// Authorization maps client identities to what they may subscribe to. A
// subscription is allowed when a rule matches both the client and the
// resource; with rules present, anything no rule allows is denied (TP3
// PERMISSION_DENIED for that resource).
type Authorization struct {
	// Rules are tried in order; without rules every client may subscribe to
	// every resource (secrets excepted, below).
	Rules []AuthzRule `yaml:"rules,omitempty"`
	// AllowSecretsWithoutMTLS serves secrets (SDS) to clients that did not
	// present a verified client certificate. Default false: secrets only
	// over mTLS.
	AllowSecretsWithoutMTLS bool `yaml:"allow_secrets_without_mtls,omitempty"`
}

// AuthzRule allows the clients it matches to subscribe to the resources it
// matches. Every list is a set of globs ("*" matches any run of characters);
// an empty list matches anything.
type AuthzRule struct {
	// Identities match the client's mTLS identity: its SPIFFE ID or any URI
	// SAN of its verified certificate. A rule with identities never matches a
	// client without mTLS.
	Identities []string `yaml:"identities,omitempty"`
	// Nodes and Clusters match the node id and cluster the client presents
	// (self-asserted: meaningful only where clients are trusted, e.g. behind
	// mTLS or on a private network).
	Nodes    []string `yaml:"nodes,omitempty"`
	Clusters []string `yaml:"clusters,omitempty"`
	// Types match the type URL or its last segment ("Cluster").
	Types []string `yaml:"types,omitempty"`
	// Authorities match the xdstp authority of a name ("" for legacy names).
	Authorities []string `yaml:"authorities,omitempty"`
	// Names match the resource name ("*" for the wildcard subscription).
	Names []string `yaml:"names,omitempty"`
}

// Keying is how clients are grouped for legacy node-tailored control planes.
type Keying struct {
	// GroupBy lists node fields — id, cluster, locality.region,
	// locality.zone, locality.sub_zone, metadata.KEY — whose values split
	// clients into groups. Each group shares one upstream stream per server,
	// whose node has the relay's id with the group appended and the group's
	// projected fields. Empty: one group.
	GroupBy []string `yaml:"group_by,omitempty"`
	// DynamicParametersFromNode maps TP2 dynamic parameter names to node
	// fields (as in GroupBy), for clients that cannot send resource locators
	// (Envoy, grpc-go): the names they subscribe to are fetched and cached
	// per parameter set, and they receive the plain resources. A field the
	// node does not have is left out (TP2 "exists" sees it absent).
	DynamicParametersFromNode map[string]string `yaml:"dynamic_parameters_from_node,omitempty"`
}

// TLS is the downstream listener's TLS. Every file is PEM and is re-read when
// it changes: new handshakes use the new files, open connections go on.
type TLS struct {
	// CertFile is the server's certificate chain, leaf first. Required.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the certificate's private key. Required.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, holds the CAs that sign client certificates:
	// every client must present one (mTLS). Empty: clients are not asked.
	ClientCAFile string `yaml:"client_ca_file,omitempty"`
}

// Node is the xDS node the relay presents upstream.
type Node struct {
	// ID is the node id. Default "xds-relay".
	ID string `yaml:"id"`
	// Cluster is the node cluster. Default "xds-relay".
	Cluster string `yaml:"cluster"`
	// Metadata is sent as the node's metadata (string values).
	Metadata map[string]string `yaml:"metadata,omitempty"`
}

// Upstream has the same shape as a gRPC xDS bootstrap (gRFC A27/A47).
type Upstream struct {
	// XDSServers are the default servers: legacy names and authorities without
	// servers of their own go to them. Tried in order.
	XDSServers []Server `yaml:"xds_servers"`
	// Authorities maps an xdstp authority to its servers.
	Authorities map[string]Authority `yaml:"authorities,omitempty"`
	// Linger is how long a resource stays subscribed upstream after its last
	// watcher leaves, written like "5s". Default 5s.
	Linger time.Duration `yaml:"linger,omitempty"`
	// UnavailableAfter: a subscribed resource that is not cached gets a TP3
	// UNAVAILABLE error when no server of its authority has been reachable for
	// this long since the subscription (before clients' own 15 s timeout).
	// Default 10s.
	UnavailableAfter time.Duration `yaml:"unavailable_after,omitempty"`
}

// Authority is one xdstp authority.
type Authority struct {
	// XDSServers are this authority's servers; empty means the default servers.
	XDSServers []Server `yaml:"xds_servers,omitempty"`
}

// Server is one upstream xDS server.
type Server struct {
	// ServerURI is host:port of the server.
	ServerURI string `yaml:"server_uri"`
	// ChannelCreds are tried in order; the first supported one is used.
	// Supported: insecure and tls, so the first entry is used. Default
	// insecure.
	ChannelCreds []ChannelCreds `yaml:"channel_creds,omitempty"`
	// Protocol is the xDS variant spoken to this server: "auto" (Delta, and
	// SotW when the server answers Delta with UNIMPLEMENTED), "sotw" or
	// "delta". Default auto.
	Protocol string `yaml:"protocol,omitempty"`
	// ServerFeatures as in the gRPC bootstrap; accepted and ignored.
	ServerFeatures []string `yaml:"server_features,omitempty"`
}

// ChannelCreds selects the transport credentials of an upstream connection,
// as in the gRPC xDS bootstrap.
type ChannelCreds struct {
	// Type is "insecure" (plaintext) or "tls" (TLS, or mTLS with a client
	// certificate; see TLSChannelCreds).
	Type string `yaml:"type"`
	// Config holds the type's settings, as in the gRPC bootstrap: for tls the
	// keys of TLSChannelCreds (decoded by ChannelCreds.TLS); insecure has
	// none and ignores it.
	Config map[string]any `yaml:"config,omitempty"`
}

// TLSChannelCreds is the config of channel_creds of type tls (gRPC's
// tls_creds config). Every file is PEM and re-read when it changes.
type TLSChannelCreds struct {
	// CACertificateFile holds the CAs that verify the server, whose
	// certificate must name the server_uri's host. Required.
	CACertificateFile string
	// CertificateFile and PrivateKeyFile are the relay's client certificate
	// and key, presented when the server asks (mTLS). Both or neither.
	CertificateFile string
	PrivateKeyFile  string
}

// Cache bounds the cache of resources.
type Cache struct {
	// MaxUnreferenced is how many resources no client watches are kept (LRU)
	// for reuse. Default 10000; 0 keeps none.
	MaxUnreferenced int `yaml:"max_unreferenced"`
	// PersistPath, when set, is the warm-restart file: the cache is written
	// there (atomically, checksummed) within a second of every change and on
	// shutdown, and loaded at start so clients are served at once even when
	// no upstream is reachable.
	PersistPath string `yaml:"persist_path,omitempty"`
}

// Limits protect the relay from misbehaving clients.
type Limits struct {
	// MaxNamesPerRequest is the most resource names one request may carry.
	// Default 10000.
	MaxNamesPerRequest int `yaml:"max_names_per_request"`
	// MaxRecvMessageBytes is the largest request accepted. Default 4 MiB.
	MaxRecvMessageBytes int `yaml:"max_recv_message_bytes"`
	// MaxSubscriptionsPerStream bounds the names one stream subscribes to,
	// all types together. Default 100000.
	MaxSubscriptionsPerStream int `yaml:"max_subscriptions_per_stream"`
	// MaxStreamsPerConnection bounds concurrent streams on one client
	// connection (HTTP/2 MAX_CONCURRENT_STREAMS). Default 100.
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// NewStreamsPerSecond is the admission rate of new streams; streams
	// beyond it (after a burst of the same size) are refused with
	// RESOURCE_EXHAUSTED and the client retries. 0 disables it. Default 5000.
	NewStreamsPerSecond float64 `yaml:"new_streams_per_second"`
	// MaxConnectionAge closes client connections (GOAWAY, grpc adds ±10%
	// jitter) so that clients rebalance across replicas. 0 disables it.
	// Default 30m.
	MaxConnectionAge time.Duration `yaml:"max_connection_age"`
	// KeepaliveMinTime is the shortest client keepalive ping interval
	// accepted; faster pingers are disconnected. Default 10s.
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
}
