// Package authz decides who may subscribe to what: a Principal (who a
// stream's client is: node id and cluster, and the identities of a verified
// client certificate), the Authorizer every server (downstream gRPC, REST,
// gateway.control.v1, CSDS) asks per subscribed name, and New, which compiles
// the authorization config into one. Match is the glob of the config's rules
// ('*' matches any run of characters).
//
// Secrets (SDS, and gateway.control.v1 SecretMaterial) are served over mTLS
// only unless the config allows otherwise; with rules, a subscription is
// allowed when one rule matches both the client and the resource.
//
// An Authorizer from New reads its config only and keeps no state: it is safe
// for concurrent use, and the config must not change after New. Match is a
// pure function.
package authz
