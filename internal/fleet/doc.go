// Package fleet generates the synthetic xDS configuration used by the load tools
// (cmd/xds-democp and cmd/xds-loadgen) and serves it as a small authoritative
// control plane.
//
// # Topology
//
// A Spec describes a fleet: N listeners, R route configurations, C clusters and
// E endpoints per cluster. Listener i ("listener-i") uses route configuration
// "route-(i mod R)" over RDS via ADS; route configuration j routes the prefix
// "/cluster-k/" to cluster k for every k with k mod R == j, plus a default route;
// cluster k ("cluster-k") is an EDS cluster over ADS whose ClusterLoadAssignment
// carries the same name. StyleEnvoy listeners are socket listeners with an
// HttpConnectionManager filter; StyleGRPC listeners are proxyless-gRPC
// api_listeners (HttpConnectionManager with RDS over ADS and the router filter),
// and every locality has load_balancing_weight 1.
//
// # Creation stamps
//
// Every generated resource carries the time it was created, so that a client can
// measure end-to-end propagation even through relays that rewrite version_info.
// The stamp is the decimal Unix time in nanoseconds, as a string value (a double
// would lose precision), at
//
//	filter_metadata["xds-democp"].fields["created_unix_nano"]
//
// of the metadata of:
//
//   - Listener:              Listener.metadata
//   - RouteConfiguration:    RouteConfiguration.metadata
//   - Cluster:               Cluster.metadata
//   - ClusterLoadAssignment: endpoints[0].lb_endpoints[0].metadata
//
// Stamp builds it and CreatedUnixNano reads it back.
//
// # Server
//
// Server serves a Spec with go-control-plane v0.14.0 (one LinearCache per type,
// so versions are right for SotW and Delta alike) over ADS SotW and Delta and the
// per-type LDS/RDS/CDS/EDS services, and optionally churns resources at a fixed
// rate.
//
// Spec, Kind and Rate are plain values. Server's methods are safe for concurrent
// use.
package fleet
