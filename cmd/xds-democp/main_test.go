package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := fleet.Spec{Listeners: 1, Routes: 1, Clusters: 100, EndpointsPerCluster: 2, Style: fleet.StyleEnvoy}
	if o.listen != "127.0.0.1:18000" || o.server.Spec != want || o.server.Churn != 0 || o.server.ChurnCount != 1 ||
		len(o.server.ChurnKinds) != 1 || o.server.ChurnKinds[0] != fleet.Endpoints || o.duration != 0 || o.logLevel != "info" {
		t.Errorf("defaults %+v", o)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(strings.Fields("--listen :1 --clusters 5 --listeners 2 --routes 3 --endpoints-per-cluster 4 "+
		"--style grpc --churn 10/s --churn-types cds|lds --churn-count 2 --duration 1m --log-level debug --authority a.example --variants env=prod,test"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := fleet.Spec{Listeners: 2, Routes: 3, Clusters: 5, EndpointsPerCluster: 4, Style: fleet.StyleGRPC, Authority: "a.example"}
	if o.listen != ":1" || o.server.Spec != want || o.server.Churn != 10 || o.server.ChurnCount != 2 ||
		len(o.server.ChurnKinds) != 2 || o.server.Variants.String() != "env=prod,test" || o.server.ChurnKinds[1] != fleet.Listeners || o.duration != time.Minute {
		t.Errorf("parsed %+v", o)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range []string{
		"--clusters 0", "--listeners -1", "--routes 0", "--endpoints-per-cluster 0", "--style nginx",
		"--churn often", "--churn-types sds", "--churn-count 0", "--duration -1s", "--bogus", "extra", "--authority a/b", "--variants env", "--variants env=a,a", "--variants =a",
	} {
		if _, err := parseFlags(strings.Fields(args), &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"--listen", "--clusters", "--listeners", "--routes", "--endpoints-per-cluster", "--style",
		"--authority", "--variants", "--churn", "--churn-types", "--churn-count", "--duration", "--version"} {
		if !strings.Contains(usage.String(), "  "+f) {
			t.Errorf("usage does not document %s", f)
		}
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"--version"}, &out, &errOut); code != 0 || out.String() != "xds-democp dev\n" {
		t.Errorf("--version: %d %q", code, out.String())
	}
	if code := run(ctx, []string{"--help"}, &out, &errOut); code != 0 {
		t.Errorf("--help: %d", code)
	}
	if code := run(ctx, []string{"--clusters", "0"}, &out, &errOut); code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}

	// Serves, churns and exits 0 when its duration ends.
	errOut.Reset()
	code := run(ctx, []string{"--listen", "127.0.0.1:0", "--churn", "200/s", "--duration", "200ms", "--log-level", "debug"},
		&out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	for _, want := range []string{"xds-democp serving", "\tDEBUG\tchange\t", "xds-democp stopped"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, errOut.String())
		}
	}

	// A cancelled context (SIGINT/SIGTERM in main) is a clean exit too.
	stopped, stop := context.WithCancel(ctx)
	stop()
	if code := run(stopped, []string{"--listen", "127.0.0.1:0"}, &out, &errOut); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}

	// A port in use is an error.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	errOut.Reset()
	if code := run(ctx, []string{"--listen", lis.Addr().String()}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "listen") {
		t.Errorf("port in use: exit %d %q", code, errOut.String())
	}
}
