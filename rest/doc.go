// Package rest serves xDS REST-JSON polling (the xDS protocol's "REST-JSON
// polling subscriptions"): POST /v3/discovery:listeners (and :routes,
// :clusters, :endpoints, :secrets, :runtime, :scoped-routes,
// :extension_configs) with a DiscoveryRequest in proto3 canonical JSON,
// answered with a DiscoveryResponse in JSON built from the relay's cache.
//
// A poll is a short-lived downstream.Watcher on the same downstream.Source
// as the gRPC streams: it binds its node, watches the request's names (LDS
// and CDS: the wildcard when it names none), and answers 200 as soon as the
// resources' version differs from the request's version_info — at once for
// an empty one, once the cache knows something of them — or 304 Not Modified
// when nothing changed within the poll timeout. The subscription keys, the
// authorization (a denied name gets a TP3 PERMISSION_DENIED entry in
// resource_errors, a denied wildcard 403), the TP3 errors and the guarded
// rollout rules are those of the gRPC paths. What a node was last sent, its
// NACKs and a canary's pending verdict are remembered between its polls
// (bounded LRU), so a NACKed version is not served to it again, and a canary
// reports on its next poll and is not held behind its rollout's barrier.
//
// REST-JSON is the one place where the relay decodes resources: JSON needs
// the message types. The Envoy types linked in types.go are known; a resource
// of any other type is answered 500 with its type named.
//
// # Concurrency
//
// Server methods are safe for concurrent use. Each poll runs on its HTTP
// handler goroutine, which owns it; the Source calls its Watcher methods
// under the Source's lock, and they only record the View and wake the
// handler. Lock order: Source lock → poll.mu; Server.mu is never held while
// calling the Source.
package rest
