// Package keying says what a resource is: its type URL, its name (a legacy
// name or an xdstp:// URN) and, later, its TP2 dynamic-parameter constraints.
// A Key is the identity of one cached resource variant.
//
// The package holds pure functions only: no I/O, no locks, no goroutines.
// Everything in it is safe for concurrent use.
package keying
