package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The upstream section as a real gRPC xDS bootstrap file, end to end: with
// the file a proxyless client would get in GRPC_XDS_BOOTSTRAP (a node the
// relay ignores, an unknown channel_creds type first, which is skipped as
// gRPC does, an authority without servers), both in the config file
// (upstream.bootstrap_file) and by flag (--upstream-bootstrap), the relay
// connects to the file's server, becomes ready and serves its resources.
func TestRunWithBootstrapFile(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bootstrap.json")
	body := `{
  "xds_servers": [{"server_uri": "` + up.Addr() + `",
    "channel_creds": [{"type": "alts"}, {"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "a-client-node", "locality": {"zone": "z1"}},
  "authorities": {"auth.example": {}},
  "client_default_listener_resource_name_template": "%s"
}`
	if err := os.WriteFile(bootstrap, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"config file": {"--config", writeFile(t, "upstream: {bootstrap_file: "+bootstrap+"}\n")},
		"flag":        {"--upstream-bootstrap", bootstrap},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stderr := newSyncBuffer()
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append(args, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"), io.Discard, stderr)
			}()
			var serving struct{ Listen, Admin string }
			select {
			case line := <-stderr.serving:
				if err := json.Unmarshal(line, &serving); err != nil {
					t.Fatal(err)
				}
			case code := <-done:
				t.Fatalf("run returned %d before serving; stderr:\n%s", code, stderr)
			case <-time.After(10 * time.Second):
				t.Fatalf("not serving; stderr:\n%s", stderr)
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			xdstest.Eventually(t, func() bool {
				resp, err := client.Get("http://" + serving.Admin + "/readyz")
				if err != nil {
					return false
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK && strings.HasPrefix(string(b), "ready: serving, synced")
			}, "ready, synced with the bootstrap file's server", func() any { return stderr.String() })

			c := xdstest.DialADS(t, serving.Listen, &core.Node{Id: "n"})
			c.Subscribe(resource.ClusterType, "c1")
			if got := c.RecvType(resource.ClusterType).GetResources(); len(got) != 1 {
				t.Fatalf("got %d clusters, want c1", len(got))
			}
			for _, req := range up.Requests() {
				if req.Node != nil && req.Node.GetId() == "a-client-node" {
					t.Fatal("the relay presented the bootstrap file's node upstream; it presents its own")
				}
			}
			c.Close()
			cancel()
			if code := <-done; code != exitOK {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
		})
	}
}
