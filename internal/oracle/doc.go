// Package oracle is a seeded simulation of the whole relay that checks every
// response every client receives against what the upstream actually had.
//
// A Schedule (Generate) is a world — relays (the real relay, upstream and
// downstream packages, one or two replicas, warm-restart files, node groups,
// guarded rollouts, a tiny max_unreferenced) in front of an in-process
// control plane (Upstream: SotW and Delta ADS, in xDS order or not, TP2
// variants, do_not_cache; a Delta server that remembers what it sent under a
// dropped wildcard, or one that forgets it as go-control-plane does) — and a
// list of steps: upstream changes with
// cross-type references, clients of every shape joining, leaving, moving
// between replicas with what they hold, reading slowly, upstream servers
// going down and coming back, relays restarting. A seed also draws, from a
// stream of its own, the dimensions of Dims: glob collections of a second
// authority, silent and slow upstreams, invalid upstream responses,
// Envoy-spelled xdstp names, TP2 replacements of the unconstrained variant,
// a default server that lists the authority's names, more than 10,000
// names, REST-JSON pollers, go-control-plane itself as the upstream servers
// (GeneratePlain is a seed without them). Execute runs it. After every
// response, each client checks:
//
//   - no phantom loss: it is told a resource is gone (a Delta removal, an
//     omission from a SotW LDS/CDS response) only if the upstream removed it
//     after publishing the content the client holds, or the relay it talks
//     to may have nothing newer from the upstream than a state without it
//     (one it had acknowledged when the client's stream asked for the type,
//     or one sent since: a replica behind); a name it subscribes and does
//     not hold is "not found yet" only if the relay may not know it (it
//     acknowledged no response carrying it a second before, or no client
//     of it watched the name for a while since: it may have evicted it);
//   - no invented state: every (name, variant, content) it holds is one the
//     upstream published, for a variant its parameters select;
//   - make before break on ADS: nothing it holds refers to a resource it was
//     just told is gone;
//   - no rollback: it is never sent content the upstream published before
//     the content it holds of that variant (brought from elsewhere: unless
//     the relay it talks to may have nothing newer yet);
//   - no resend of a version it ACKed, unless it asked again.
//
// When the schedule is over, every client must converge on exactly the
// upstream's state of what it subscribes to. A failure carries the seed;
// Shrink finds a shorter schedule that still fails.
//
// Runs are not deterministic (goroutines, the network): a schedule is, and a
// failing one is retried while shrinking.
package oracle
