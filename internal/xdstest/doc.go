// Package xdstest holds the shared helpers of xds-relay's tests: a real
// go-control-plane xDS server that records every request it receives and can
// be stopped and restarted (Upstream; over snapshots, over per-resource
// LinearCaches with Linear, or around a test's own ADS with WithADS, such as
// GlobADS, a CDS control plane that expands xdstp glob collections), a gRPC
// backend that answers any method and says who it is (Backend), the minimal
// proxyless-gRPC resource set (GRPCResources), a gRPC xDS bootstrap builder
// (Bootstrap), raw ADS SotW and Delta clients for protocol tests (ADSClient,
// DeltaClient), gateway.control.v1 data planes (DialGatewaySotW,
// DialGatewayDelta) and a control plane's load reporting service that records
// what it receives (LRSUpstream).
//
// Only tests import this package (and internal/oracle, which only its test
// imports), so it may import testing: no shipped binary links it. Every
// helper binds to 127.0.0.1:0, takes the test's testing.TB, fails the test on
// setup errors and registers its own cleanup, so tests need no teardown code. Waits use contexts of at most
// WaitTimeout; nothing here sleeps to synchronise.
//
// All methods are safe for concurrent use unless their comment says otherwise.
package xdstest

import "time"

// WaitTimeout bounds every Must*/Wait* helper that takes no context.
const WaitTimeout = 10 * time.Second
