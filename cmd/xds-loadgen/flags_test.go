package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags([]string{"--target", "127.0.0.1:18000"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.Target != "127.0.0.1:18000" || c.Clients != 100 || c.StreamsPerConn != 1 || c.Ramp != 0 ||
		c.Mode != ModeEnvoy || c.Protocol != ProtocolSotW || c.LDSName != "listener-0" || c.Duration != 20*time.Second ||
		c.SyncTimeout != 30*time.Second || c.NACKRatio != 0 || c.SlowRatio != 0 || c.NodePrefix != "xds-loadgen" || o.json {
		t.Errorf("defaults: %+v json=%v", c, o.json)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(strings.Fields("--target h:1 --clients 7 --streams-per-conn 3 --ramp 50/s --mode grpc "+
		"--protocol delta --lds-name L --duration 3s --updates 4 --sync-timeout 9s --nack-ratio 0.2 --slow 0.5 "+
		"--slow-delay 1ms --stuck 0.25 --progress-every 1s --json --node-prefix np --log-level debug --params env=prod,zone=a|env=test"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Target: "h:1", Clients: 7, StreamsPerConn: 3, Ramp: fleet.Rate(50), Mode: ModeGRPC, Protocol: ProtocolDelta,
		LDSName: "L", Duration: 3 * time.Second, Updates: 4, SyncTimeout: 9 * time.Second, NACKRatio: 0.2, SlowRatio: 0.5,
		SlowDelay: time.Millisecond, StuckRatio: 0.25, NodePrefix: "np",
		Params: []map[string]string{{"env": "prod", "zone": "a"}, {"env": "test"}}, Dialect: DialectXDS, GatewayClusters: 1}
	if !reflect.DeepEqual(o.cfg, want) || !o.json || o.logLevel != "debug" || o.progressEvery != time.Second {
		t.Errorf("got %+v json=%v level=%s\nwant %+v", o.cfg, o.json, o.logLevel, want)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range []string{
		"",
		"--target h:1 --clients 0",
		"--target h:1 --streams-per-conn 0",
		"--target h:1 --ramp fast",
		"--target h:1 --mode istio",
		"--target h:1 --protocol rest",
		"--target h:1 --mode grpc --params env",
		"--target h:1 --mode envoy --params env=prod",
		"--target h:1 --dialect rest",
		"--target h:1 --dialect gateway --gateway-types listener,widget",
		"--target h:1 --dialect gateway --gateway-clusters 0",
		"--target h:1 --dialect gateway --mode grpc --params env=prod",
		"--target h:1 --nack-ratio 1.5",
		"--target h:1 --slow -0.1",
		"--target h:1 --stuck 1.5",
		"--target h:1 --dialect gateway --stuck 0.5",
		"--target h:1 --progress-every -1s",
		"--target h:1 --sync-timeout 0s",
		"--target h:1 --duration -1s",
		"--target h:1 --updates -1",
		"--target h:1 --bogus",
		"--target h:1 extra",
	} {
		if _, err := parseFlags(strings.Fields(args), &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	for _, f := range []string{"--target", "--clients", "--streams-per-conn", "--ramp", "--mode", "--protocol", "--lds-name",
		"--duration", "--sync-timeout", "--nack-ratio", "--slow", "--json", "--node-prefix", "--version"} {
		if !strings.Contains(usage.String(), "  "+f) {
			t.Errorf("usage does not document %s", f)
		}
	}
	if o, err := parseFlags([]string{"--version"}, &bytes.Buffer{}); err != nil || !o.version {
		t.Errorf("--version: %+v %v", o, err)
	}
}

func TestRunFlags(t *testing.T) {
	ctx := testContext(t)
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"--version"}, &out, &errOut, nil); code != 0 || out.String() != "xds-loadgen dev\n" {
		t.Errorf("--version: %d %q", code, out.String())
	}
	if code := run(ctx, []string{"--help"}, &out, &errOut, nil); code != 0 {
		t.Errorf("--help: %d", code)
	}
	errOut.Reset()
	if code := run(ctx, []string{"--clients", "3"}, &out, &errOut, nil); code != 2 || !strings.Contains(errOut.String(), "target") {
		t.Errorf("missing --target: %d %q", code, errOut.String())
	}
	if code := run(ctx, []string{"--target", "h:1", "--log-level", "loud"}, &out, &errOut, nil); code != 2 {
		t.Errorf("bad --log-level: %d", code)
	}
}

func TestParseFlagsNodeAndTLS(t *testing.T) {
	o, err := parseFlags(strings.Fields("--target h:1 --node-cluster c-{i%2} --locality r/z-{i%3}/s{i} "+
		"--node-metadata env=e{i%2},id={id} --tls-ca ca.pem --tls-cert c.pem --tls-key k.pem --tls-server-name relay "+
		"--allow-removals"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	wantNode := NodeTemplate{Cluster: "c-{i%2}", Locality: "r/z-{i%3}/s{i}", Metadata: map[string]string{"env": "e{i%2}", "id": "{id}"}}
	if !reflect.DeepEqual(o.cfg.Node, wantNode) || !o.cfg.AllowRemovals ||
		!reflect.DeepEqual(o.cfg.TLS, &TLSFiles{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "relay"}) {
		t.Errorf("node %+v tls %+v allow-removals %v", o.cfg.Node, o.cfg.TLS, o.cfg.AllowRemovals)
	}
	if o, err := parseFlags(strings.Fields("--target h:1 --tls"), &bytes.Buffer{}); err != nil || o.cfg.TLS == nil {
		t.Errorf("--tls: %+v %v", o.cfg.TLS, err)
	}
	for _, args := range []string{
		"--target h:1 --node-cluster c-{j}",
		"--target h:1 --locality r/{i%0}",
		"--target h:1 --locality a/b/c/d",
		"--target h:1 --node-metadata env",
		"--target h:1 --tls-cert c.pem",
	} {
		if _, err := parseFlags(strings.Fields(args), &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
}

func TestNodeTemplate(t *testing.T) {
	cfg := Config{NodePrefix: "lg", Mode: ModeEnvoy, Node: NodeTemplate{Cluster: "blue-{i%3}", Locality: "r1/zone-{i%2}",
		Metadata: map[string]string{"env": "e{i%2}", "who": "{id}#{i}"}}}
	n := newNode(cfg, 5)
	if n.GetId() != "lg-5" || n.GetCluster() != "blue-2" || n.GetLocality().GetRegion() != "r1" ||
		n.GetLocality().GetZone() != "zone-1" || n.GetLocality().GetSubZone() != "" {
		t.Errorf("node %v", n)
	}
	md := n.GetMetadata().GetFields()
	if md["env"].GetStringValue() != "e1" || md["who"].GetStringValue() != "lg-5#5" {
		t.Errorf("metadata %v", md)
	}
	if d := newNode(Config{NodePrefix: "lg"}, 0); d.GetCluster() != "lg" || d.GetLocality().GetZone() != "zone-a" || d.GetMetadata() != nil {
		t.Errorf("default node %v", d)
	}
}
