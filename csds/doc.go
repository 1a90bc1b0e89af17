// Package csds serves the Client Status Discovery Service
// (envoy.service.status.v3.ClientStatusDiscoveryService: StreamClientStatus
// and FetchClientStatus) for the whole fleet behind the relay: one
// ClientConfig per connected xDS client (the streams of one node id from one
// peer address), with its node, client_scope set to the node id (what
// grpcdebug's --scope selects) and, per subscribed type and name, a
// GenericXdsConfig per resource holding the version the client holds and its
// status — SYNCED (the latest response ACKed), STALE (a newer one sent, not
// answered yet), ERROR (NACKed: the reason and the rejected version in
// error_state) or NOT_SENT (none held) — with the matching client_status.
//
// Entries are per resource: one for each resource the client holds or asks
// for by name, never the wildcard (a wildcard client lists each resource it
// holds). version_info is the version of the resource the client holds —
// derived from its bytes, so the same resource has the same version on every
// client, SotW or Delta (a SotW response's own version_info names a
// response: RDS/EDS responses carry only what changed, so clients holding
// the same config may differ there) — and xds_config the resource as the
// client received it, unless the request sets exclude_resource_contents.
// What a SotW client holds is the latest response it ACKed (a resource of a
// response it has not answered yet and holds none of is STALE with
// REQUESTED); a Delta client, what was sent to it. A name it holds none of is NOT_SENT with
// DOES_NOT_EXIST once the relay answered that there is none, REQUESTED
// before. The bodies are the stream's Views' (shared, read-only): answering
// costs the fan-out nothing. Contents are bounded by MaxContentBytes per
// answer (3 MiB: under grpc-go's 4 MiB receive limit); entries past it
// carry none, and FetchClientStatus sets ContentsCutHeader. last_updated is
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
