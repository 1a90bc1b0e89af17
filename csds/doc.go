// Package csds serves the Client Status Discovery Service
// (envoy.service.status.v3.ClientStatusDiscoveryService: StreamClientStatus
// and FetchClientStatus) for the whole fleet behind the relay: one
// ClientConfig per connected xDS client (the streams of one node id from one
// peer address), with its node, client_scope set to the node id (what
// grpcdebug's --scope selects) and, per subscribed type and name, a
// GenericXdsConfig holding the version the client holds and its status —
// SYNCED (the latest response ACKed), STALE (sent, not answered yet), ERROR
// (NACKed: the reason and the rejected version in error_state) or NOT_SENT
// (subscribed, nothing sent yet) — with the matching client_status.
//
// SotW versions are per response, so a SotW stream's names share its type's
// version and status, and a wildcard subscription is one entry named "*"; a
// Delta stream reports each resource it holds with its own version. Resource
// contents are never included (see /debug/cache for those). last_updated is
// when the type's state last changed on the stream (a response, an ACK or
// a NACK); zero before that (grpcdebug needs the field, and shows a zero
// time as blank).
//
// Requests are filtered by node_matchers (node id and metadata; every
// envoy.type.matcher.v3 string and value matcher except custom extensions).
// Answers are bounded: at most MaxClients ClientConfigs, sorted by node id
// and peer. FetchClientStatus pages through the rest with the
// xds-relay-page-token request metadata and the xds-relay-next-page-token
// response header, and reports the number of matching clients in
// xds-relay-matched-clients; a stream gets the first page of each request
// (narrow it with node_matchers).
//
// Authorization is the xDS one: a caller must be allowed the type
// ClientConfigType with the name "*", and sees only the entries of types and
// names it could subscribe to itself (so secrets' names need mTLS by
// default).
//
// # Concurrency
//
// Server methods are safe for concurrent use. Each request reads a snapshot
// of the downstream server (Snapshot) and holds no lock of its own.
package csds
