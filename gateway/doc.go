// Package gateway relays gateway.control.v1 (ref/gateway-control-v1.md), the
// xDS-style protocol of a gateway whose data planes take whole configuration
// snapshots, between the gateway's control plane (the relay's upstream
// servers) and its data planes.
//
// # StreamConfiguration (snapshots)
//
// Data planes are grouped by their subscribed type URLs and the request
// fields of Options.GroupBy (the cluster by default). Each group has one
// upstream stream, which subscribes for the whole group and holds the latest
// snapshot as the upstream's bytes with its version; every stream of the
// group is sent the same encoded snapshot with its own nonce (downstream's
// pre-encoded messages). A data plane's ACK or NACK is read from
// result_status and error_detail on the latest nonce (a stale nonce is
// ignored); a NACKed version is never sent to it again, only the next one. A
// data plane that reconnects with the group's version is not sent it again.
// While the upstream is away the group keeps serving its snapshot (fail
// static); with a persist path it survives a restart.
//
// # DeltaStreamConfiguration (resources)
//
// Subscriptions are type URLs. A Delta group (keyed by the GroupBy fields)
// keeps one upstream Delta stream subscribing the union of its streams'
// types and a per-resource cache (the upstream's Resource bytes and
// versions). A stream is sent, per type, the resources at versions it does
// not hold — honouring initial_resource_versions (type URL → JSON object of
// name → version) — and removals. Only the upstream's word removes: a
// removal, or absence from a non_incremental response. A type the upstream
// has not answered yet (a cold or warm-loaded cache) sends no removals.
//
// This is a cache of its own rather than the relay's xDS cache: the
// upstream here speaks gateway.control.v1, not envoy xDS, its subscriptions
// are whole types rather than names, and feeding the relay's cache would
// need a second upstream client inside the relay's cache code.
//
// # ReportStatus
//
// Answered at once (accepted); the latest report per node is kept (LRU) for
// /debug/gateway and counted in xds_relay_gateway_dataplanes{version,ready};
// every report is forwarded upstream by one forwarder goroutine — coalesced
// per node while pending, each tried at most ReportRetries times.
//
// # Authorization
//
// Options.Authorize is asked per subscribed type URL (name "*"); a SotW
// stream without subscriptions (every type) is asked for SecretMaterialType.
// The relay applies the rules of secrets to SecretMaterialType (mTLS unless
// allowed otherwise). A denial ends the stream with PERMISSION_DENIED, and so
// does a snapshot carrying secrets (ConfigSnapshot field 8) for a stream not
// authorized for them: they are never forwarded to it.
//
// # Concurrency
//
// Server methods are safe for concurrent use. Each data plane stream has its
// handler goroutine, the only sender on it, and a receive pump feeding it
// requests; groups wake streams through one-slot channels and never block on
// them (a stream picks up the latest state when it gets to it). Each group
// has one upstream runner goroutine (and, for Delta, a sender while its
// stream is open). Lock order: Server.mu → group mu → stream mu; nothing
// sends on a network stream while holding a lock. Close waits for every
// goroutine the server started.
package gateway
