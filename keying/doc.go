// Package keying says what a resource is: its type URL, its name (a legacy
// name or an xdstp:// URN) and its TP2 dynamic-parameter constraints
// (CanonicalConstraints, Match, Select), and how a client's node maps to a
// group and to dynamic parameters. A Key is the identity of one cached
// resource variant.
//
// # TP1 names
//
// A name starting with "xdstp:" follows xRFC TP1:
//
//	xdstp://{authority}/{resource type}/{id}?{context params}#{directives}
//
// Every other name is a legacy name: opaque, compared byte for byte, never
// rewritten. ParseURN reads a resource name (a URN: no directives, no glob)
// into a URN; ParseURL also accepts glob collections (".../foo/*") and the
// "#alt=" / "#entry=" directives, which locate resources but are not cache
// keys. URN.String writes the canonical form, and Canonical maps any
// subscribed name to it: context params sorted by key, redundant
// percent-escapes decoded, necessary ones in upper-case hex. Two URNs are the
// same resource exactly when their canonical forms are equal (TP1
// "Normalization"). A glob URN's Matches tells which resource names it covers.
// The parsing rules (empty authority and id, duplicate keys, '+' and so on)
// are written on ParseURN.
//
// # Subscriptions and groups
//
// A subscription key is a name with the TP2 dynamic parameters it was
// subscribed with: SubscriptionKey and NodeSubscriptionKey make one,
// SplitSubscriptionKey and HasParams read it. GroupKey projects a client's
// node onto the configured group_by fields, GroupNode is the node a group's
// upstream streams present, and LookupNodeField reads one node field for
// both and for dynamic_parameters_from_node. ShortType is a type URL's last
// element ("Cluster"), as people and filters write it.
//
// The package holds pure functions only: no I/O, no locks, no goroutines.
// Everything in it is safe for concurrent use.
package keying
