// Package config is xds-relay's YAML configuration: the schema, its defaults
// (Default), the loader (Parse, Load) and the validation (Config.Validate).
//
// The loader decodes a file over Default, so a key absent from the file keeps
// its default; unknown keys are errors. Every error, from the loader or from
// Validate, names the offending field by its path in the file, e.g.
// "upstream.xds_servers[0].server_uri". To report every problem of a file at
// once, with lines: ParseAll (or LoadAll), Validate, then Locations.Report.
//
// The package holds no state; a *Config is a plain value that callers must not
// mutate while another goroutine reads it.
package config

import "time"

// Config is the whole relay configuration (see docs/INTERFACE.md). The defaults
// documented on each field are those of Default; Parse decodes a file over
// them, so a field the file does not mention keeps its default.
type Config struct {
	// Listen is the downstream xDS gRPC address. Default ":18001".
	Listen string `yaml:"listen"`
	// Admin is the admin HTTP address. Default "127.0.0.1:9902"; "" disables it.
	Admin string `yaml:"admin"`
	// ProbeListen is the address of the probe HTTP API: /healthz, /readyz
	// and /metrics only, for the kubelet and Prometheus while the admin API
	// stays on loopback. Default "": off.
	ProbeListen string `yaml:"probe_listen"`
	// AdminTokenFile, when set, is a file holding a bearer token that the
	// admin API's /drain and /debug/* paths require (Authorization: Bearer
	// TOKEN); read at start and again when it changes. Default "": open.
	AdminTokenFile string `yaml:"admin_token_file"`
	// Channelz serves grpc.channelz.v1.Channelz (grpcdebug) on Listen.
	// Default false: it shows every client's address and the relay's
	// upstream connections to whoever reaches the xDS port.
	Channelz bool `yaml:"channelz"`
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

	// Readiness says when /readyz answers 200.
	Readiness Readiness `yaml:"readiness"`
	// Shutdown is the drain on SIGTERM/SIGINT and POST /drain.
	Shutdown Shutdown `yaml:"shutdown"`
	// REST, when set, serves REST-JSON polling on its own HTTP listener
	// (see dialects.go). nil: off.
	REST *REST `yaml:"rest,omitempty"`
	// Gateway tunes the gateway.control.v1 dialect (see dialects.go). nil:
	// the defaults.
	Gateway *Gateway `yaml:"gateway,omitempty"`
}

// Readiness says when the relay is ready for clients (/readyz 200): it
// serves, is not draining, and its cache is warm.
type Readiness struct {
	// RequireSync makes only a sync with an upstream count as warm: a cache
	// loaded from cache.persist_path is not enough. Default false: either
	// one makes the relay ready.
	RequireSync bool `yaml:"require_sync"`
}

// Shutdown is the drain of the open xDS streams.
type Shutdown struct {
	// DrainWindow is the time over which the client connections of the xDS
	// listener are closed, so that their streams end (UNAVAILABLE) and the
	// clients reconnect to another replica, evenly spread so that the other
	// replicas see no reconnect storm. 0 closes them all at once. Default 5s.
	DrainWindow time.Duration `yaml:"drain_window"`
}

// Rollout is the guarded rollout of changed resources.
type Rollout struct {
	// CanaryFraction of each resource's watchers get a change first (at
	// least one client, so 0 means one). Default 0.1 when the key is absent.
	CanaryFraction float64 `yaml:"canary_fraction"`
	// Hold is how long the others wait for the canaries' ACKs; it must be
	// positive. Default 2s when the key is absent.
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

// TLS is the downstream listener's TLS. Every file is PEM and is re-read
// every RefreshInterval: new handshakes use the new files, open connections
// go on.
type TLS struct {
	// CertFile is the server's certificate chain, leaf first. Required.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the certificate's private key. Required.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, holds the CAs that sign client certificates:
	// every client must present one (mTLS). Empty: clients are not asked.
	ClientCAFile string `yaml:"client_ca_file,omitempty"`
	// RefreshInterval is how often the files are re-read (gRPC's
	// file_watcher certificate provider). Default 10m.
	RefreshInterval time.Duration `yaml:"refresh_interval,omitempty"`
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

// Upstream has the same shape as a gRPC xDS bootstrap (gRFC A27/A47), or
// names one.
type Upstream struct {
	// BootstrapFile, when set, is a gRPC xDS bootstrap JSON file (the file
	// GRPC_XDS_BOOTSTRAP names) whose xds_servers and authorities are used as
	// XDSServers and Authorities; the config then sets neither. The file's
	// other keys (node, certificate_providers, listener templates) are
	// ignored: the relay presents its own node. Read by Parse, and by
	// LoadBootstrap.
	BootstrapFile string `yaml:"bootstrap_file,omitempty"`
	// XDSServers are the default servers: legacy names and authorities without
	// servers of their own go to them. Tried in order.
	XDSServers []Server `yaml:"xds_servers"`
	// Authorities maps an xdstp authority to its servers.
	Authorities map[string]Authority `yaml:"authorities,omitempty"`
	// Linger is how long a resource stays subscribed upstream after its last
	// watcher leaves, written like "5s"; 0 unsubscribes it at once. Default
	// 5s.
	Linger time.Duration `yaml:"linger"`
	// UnavailableAfter: a subscribed resource that is not cached gets a TP3
	// UNAVAILABLE error when no server of its authority has been reachable for
	// this long since the subscription (before clients' own 15 s timeout).
	// Must be positive. Default 10s.
	UnavailableAfter time.Duration `yaml:"unavailable_after"`
	// DoesNotExistAfter: a subscribed resource a connected upstream has
	// said nothing of for this long is taken as not existing, as xDS clients
	// do with their own timer (a SotW server never says a named resource
	// does not exist). Must be positive. Default 15s.
	DoesNotExistAfter time.Duration `yaml:"does_not_exist_after"`
	// MoveWait: a removal that a client may still refer to (make before
	// break), where the relay can neither keep the resource nor read the
	// referrer (the client brought them from elsewhere), waits this long
	// after it arrived for the upstream's next responses to move the
	// reference: an upstream that sends a snapshot type by type sends the
	// cluster's removal before the route's move, seconds apart when the
	// snapshot holds tens of thousands of names. A client that came back
	// with config may also hold a type it has not asked for yet until it
	// answers a response, or for this long. Must be positive. Default 1s.
	MoveWait time.Duration `yaml:"move_wait"`
}

// Authority is one xdstp authority.
type Authority struct {
	// XDSServers are this authority's servers; empty means the default servers.
	XDSServers []Server `yaml:"xds_servers,omitempty"`
}

// Server is one upstream xDS server.
type Server struct {
	// ServerURI is the server's gRPC target: host:port, or dns:///host:port,
	// passthrough:///host:port, unix:PATH.
	ServerURI string `yaml:"server_uri"`
	// ChannelCreds are the transport credentials, as in the gRPC bootstrap:
	// types the relay does not support are skipped and the first supported
	// one is used (ChannelCreds.Supported); at least one must be. Default
	// insecure.
	ChannelCreds []ChannelCreds `yaml:"channel_creds,omitempty"`
	// CallCreds are per-call credentials sent on every stream to the server
	// (gRFC A97): of type jwt_token_file, with config {jwt_token_file: PATH},
	// the token read from the file (and again when it expires) is sent as
	// "authorization: Bearer TOKEN". They need TLS channel creds. Types the
	// relay does not support are skipped.
	CallCreds []CallCreds `yaml:"call_creds,omitempty"`
	// Protocol is the xDS variant spoken to this server: "auto" (Delta, and
	// SotW when the server answers Delta with UNIMPLEMENTED), "sotw" or
	// "delta". Default auto.
	Protocol string `yaml:"protocol,omitempty"`
	// ServerFeatures as in the gRPC bootstrap; accepted and ignored.
	ServerFeatures []string `yaml:"server_features,omitempty"`
}

// Channel credential types of the gRPC bootstrap the relay supports.
const (
	CredsInsecure      = "insecure"
	CredsTLS           = "tls"
	CredsGoogleDefault = "google_default"
	// CallCredsJWTTokenFile is the call credential type of gRFC A97.
	CallCredsJWTTokenFile = "jwt_token_file"
)

// ChannelCreds selects the transport credentials of an upstream connection,
// as in the gRPC xDS bootstrap.
type ChannelCreds struct {
	// Type is "insecure" (plaintext), "tls" (TLS, or mTLS with a client
	// certificate; see TLSChannelCreds) or "google_default"; other types are
	// skipped.
	Type string `yaml:"type"`
	// Config holds the type's settings, as in the gRPC bootstrap: for tls the
	// keys of TLSChannelCreds (decoded by ChannelCreds.TLS); the others have
	// none.
	Config map[string]any `yaml:"config,omitempty"`
}

// Supported reports whether the relay can use this type of credentials.
func (cc ChannelCreds) Supported() bool {
	switch cc.Type {
	case CredsInsecure, CredsTLS, CredsGoogleDefault:
		return true
	}
	return false
}

// Selected returns the channel credentials the relay uses for s: the first
// supported entry (insecure when s has none), and false when none is.
func (s Server) Selected() (ChannelCreds, bool) {
	if len(s.ChannelCreds) == 0 {
		return ChannelCreds{Type: CredsInsecure}, true
	}
	for _, cc := range s.ChannelCreds {
		if cc.Supported() {
			return cc, true
		}
	}
	return ChannelCreds{}, false
}

// CallCreds are per-call credentials of an upstream server (gRFC A97).
type CallCreds struct {
	// Type is "jwt_token_file"; other types are skipped.
	Type string `yaml:"type"`
	// Config for jwt_token_file: {jwt_token_file: PATH}.
	Config map[string]any `yaml:"config,omitempty"`
}

// TLSChannelCreds is the config of channel_creds of type tls (gRPC's
// tls_creds, gRFC A65). The files are PEM, re-read every RefreshInterval.
type TLSChannelCreds struct {
	// CACertificateFile holds the CAs that verify the server, whose
	// certificate must name the server_uri's host. Empty: the system roots.
	CACertificateFile string
	// CertificateFile and PrivateKeyFile are the relay's client certificate
	// and key, presented when the server asks (mTLS). Both or neither.
	CertificateFile string
	PrivateKeyFile  string
	// SPIFFETrustBundleMapFile, instead of CACertificateFile, verifies the
	// server's SPIFFE ID against a SPIFFE trust bundle map (gRFC A87; gRPC
	// honours it when GRPC_EXPERIMENTAL_XDS_MTLS_SPIFFE=true).
	SPIFFETrustBundleMapFile string
	// RefreshInterval is how often the files are re-read. Default 10m
	// (gRPC's file_watcher certificate provider).
	RefreshInterval time.Duration
}

// Cache bounds the cache of resources.
type Cache struct {
	// MaxUnreferenced is how many resources no client watches are kept (LRU)
	// for reuse. Default 10000; 0 keeps none.
	MaxUnreferenced int `yaml:"max_unreferenced"`
	// PersistPath, when set, is the warm-restart file: the cache is written
	// there (atomically, checksummed) within PersistInterval of a change and
	// on shutdown, and loaded at start so clients are served at once even
	// when no upstream is reachable.
	PersistPath string `yaml:"persist_path,omitempty"`
	// PersistInterval is the least time between two writes of the
	// warm-restart files, and the most a change waits to be written: a crash
	// (not a shutdown, which writes) loses at most the changes of the last
	// PersistInterval. A write is skipped when nothing changed. Default 1s
	// (also when 0).
	PersistInterval time.Duration `yaml:"persist_interval,omitempty"`
}

// Limits protect the relay from misbehaving clients.
type Limits struct {
	// MaxNamesPerRequest is the most resource names one request may
	// subscribe and unsubscribe (initial_resource_versions, what a Delta
	// client holds, are bounded by MaxRecvMessageBytes alone). A request over
	// it or over MaxSubscriptionsPerStream is refused for its type only: the
	// client keeps its previous subscription of the type and the stream goes
	// on. Default 100000: an Envoy with 20,000 clusters names them all in one
	// EDS request.
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
