// Package gworacle is a seeded simulation of the relay's gateway.control.v1
// dialect (package gateway) that checks every response every data plane
// receives against what the control plane actually published.
//
// A Schedule (Generate) is a world — two or three relay replicas (the real
// relay, with warm-restart files) in front of an internal/gatewaycp control
// plane whose clusters' snapshots change by seed — and a list of steps:
// publishes, SotW and Delta data planes joining, leaving and moving between
// replicas with what they hold (SotW: the version they run; Delta:
// initial_resource_versions), relay restarts, control plane outages and
// returns. Execute runs it. At every response, the data plane checks:
//
//   - no invented state: a snapshot is one the control plane published at
//     its version (filtered to the subscriptions); a Delta resource is one
//     it published, and its version is the hash of its content;
//   - no rollback: it is never sent a snapshot or resource the control
//     plane published before the one it holds; for what it brought from
//     elsewhere (another replica, before a restart), unless the relay's own
//     upstream stream may have told it nothing newer yet (its window: from
//     what it was last sent before the data plane's stream opened to what it
//     was sent since);
//   - no phantom removal: a Delta data plane is told a resource is gone
//     (removed_resources, or absent from a non_incremental response) only if
//     the control plane removed it after publishing the content held (or,
//     for content brought, the relay's window has a state without it).
//
// When the schedule is over (control plane up, every relay running), every
// data plane must hold exactly the control plane's latest state of its
// cluster. A failure carries the seed; Shrink finds a shorter schedule that
// still fails. Schedules are deterministic; runs are not (goroutines, the
// network), so a failing schedule is retried while shrinking.
package gworacle
