package main

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/fleet"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// runThrough runs cfg's clients and checks that every one synced and saw at
// least cfg.Updates updates; it returns the summary.
func runThrough(t *testing.T, cfg Config) *Summary {
	t.Helper()
	// A client that never syncs fails the run; one that syncs late on a busy
	// machine (-race on 2 cores beside other work) does not.
	cfg.SyncTimeout = 2 * time.Minute
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := e.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Synced != cfg.Clients || s.Failed != 0 {
		t.Fatalf("synced %d failed %d of %d", s.Synced, s.Failed, cfg.Clients)
	}
	if want := cfg.Updates * int64(cfg.Clients); s.Updates < want {
		t.Errorf("updates %d, want ≥ %d", s.Updates, want)
	}
	// xds-democp deletes nothing: the relay never told a client that a
	// resource it held was gone.
	if s.Losses != 0 && !cfg.AllowRemovals {
		t.Errorf("%d losses through the relay: %+v", s.Losses, s.LossExamples)
	}
	return s
}

// A few hundred simulated clients through the relay, SotW and Delta: every
// client syncs, sees updates, and the control plane serves one relay.
func TestThroughRelay(t *testing.T) {
	const clients = 150
	cp := startDemoCP(t, fleet.StyleEnvoy)
	r := xdstest.StartRelay(t, cp)
	for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
		t.Run(string(proto), func(t *testing.T) {
			runThrough(t, Config{Target: r.Addr(), Clients: clients, StreamsPerConn: 10, Mode: ModeEnvoy, Protocol: proto,
				Duration: 10 * time.Second, Updates: 2})
		})
	}
}

// A federated fleet (every name xdstp://auth.example/...) through the relay:
// gRPC-like clients resolve LDS→RDS→CDS→EDS by xdstp name, Envoy-like ones
// mix the default authority's wildcards with named xdstp subscriptions.
func TestThroughRelayFederated(t *testing.T) {
	const clients = 50
	spec := fleet.Spec{Listeners: 2, Routes: 2, Clusters: 20, EndpointsPerCluster: 2, Style: fleet.StyleGRPC, Authority: "auth.example"}
	cp := startFleet(t, spec)
	r := xdstest.StartRelay(t, cp, xdstest.WithConfig(func(c *config.Config) {
		c.Upstream.Authorities = map[string]config.Authority{"auth.example": {}} // the default servers
	}))
	for _, mode := range []Mode{ModeGRPC, ModeEnvoy} {
		t.Run(string(mode), func(t *testing.T) {
			runThrough(t, Config{Target: r.Addr(), Clients: clients, Mode: mode, Protocol: ProtocolSotW,
				// The loss check runs: an xdstp resource that also reaches the
				// default authority's stream (its wildcard answer) belongs to
				// auth.example alone, so it never leaves the Envoy-like
				// clients' SotW LDS/CDS sets (it once did, found by this check).
				LDSName: spec.Name(fleet.Listeners, 0), Duration: 5 * time.Second, Updates: 1})
		})
	}
	// The xdstp names went to the authority's own upstream stream.
	for _, u := range r.DebugUpstreams() {
		if u.Authority == "auth.example" && len(u.Types) > 0 {
			return
		}
	}
	t.Fatalf("no upstream subscriptions for auth.example: %+v", r.DebugUpstreams())
}

// A fleet served as TP2 variants (env=prod, env=test) through the relay:
// gRPC-like clients with either parameter set subscribe with resource
// locators and all sync and see updates, over SotW and Delta; the relay holds
// one upstream subscription per (name, parameter set).
func TestThroughRelayTP2(t *testing.T) {
	const clients = 40
	spec := fleet.Spec{Listeners: 1, Routes: 1, Clusters: 10, EndpointsPerCluster: 1, Style: fleet.StyleGRPC}
	r := xdstest.StartRelay(t, startFleet(t, spec, "prod", "test"))
	for _, proto := range []Protocol{ProtocolSotW, ProtocolDelta} {
		t.Run(string(proto), func(t *testing.T) {
			runThrough(t, Config{Target: r.Addr(), Clients: clients, Mode: ModeGRPC, Protocol: proto,
				Params: []map[string]string{{"env": "prod"}, {"env": "test"}}, Duration: 5 * time.Second, Updates: 1})
		})
	}
	// Every cached variant is one of the two, with its constraint, and both
	// are cached for every resource.
	seen := map[string]int{}
	for _, e := range r.DebugCache(relay.CacheFilter{}) {
		if e.Constraints != "env=prod" && e.Constraints != "env=test" {
			t.Errorf("cached %s %s with constraints %q", e.Type, e.Name, e.Constraints)
		}
		seen[e.Constraints]++
	}
	if want := 1 + 1 + 10 + 10; seen["env=prod"] != want || seen["env=test"] != want {
		t.Errorf("cached variants %v, want %d of each", seen, want)
	}
}

// Clients over mTLS, with node templates: the relay (client_ca_file set)
// serves them all, and keying.group_by on the templated cluster splits them
// into one upstream group per value.
func TestThroughRelayMTLSAndNodeTemplates(t *testing.T) {
	const clients = 12
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "relay-ca")
	caFile := xdstest.WriteFile(t, dir, "ca.pem", ca.CertPEM())
	serverCert, serverKey := ca.Server(t).Write(t, dir, "server")
	clientCert, clientKey := ca.Client(t, "spiffe://example.org/loadgen").Write(t, dir, "client")

	cp := startDemoCP(t, fleet.StyleEnvoy)
	r := xdstest.StartRelay(t, cp, xdstest.WithConfig(func(c *config.Config) {
		c.TLS = &config.TLS{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: caFile}
		c.Keying = &config.Keying{GroupBy: []string{"cluster"}}
	}))
	runThrough(t, Config{Target: r.Addr(), Clients: clients, Mode: ModeEnvoy, Protocol: ProtocolSotW,
		Duration: 5 * time.Second, Updates: 1,
		TLS:  &TLSFiles{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey},
		Node: NodeTemplate{Cluster: "blue-{i%3}", Locality: "region-1/zone-{i%2}", Metadata: map[string]string{"env": "e{i%2}"}}})

	groups := map[string]bool{}
	for _, e := range r.DebugCache(relay.CacheFilter{}) {
		groups[e.Scope] = true
	}
	want := map[string]bool{"group:cluster=blue-0": true, "group:cluster=blue-1": true, "group:cluster=blue-2": true}
	if !reflect.DeepEqual(groups, want) {
		t.Errorf("cache scopes %v, want one group per templated cluster %v", groups, want)
	}
}
