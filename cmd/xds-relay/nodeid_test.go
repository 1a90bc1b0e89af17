package main

import (
	"sync"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// --node-id replaces the config file's node.id: the upstream sees the
// flag's id (a Deployment passes each pod's name).
func TestNodeIDFlag(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	up := xdstest.StartUpstream(t, xdstest.WithNodeHash(func(n *core.Node) string {
		mu.Lock()
		defer mu.Unlock()
		seen[n.GetId()] = true
		return xdstest.DefaultKey
	}))
	up.SetResources(xdstest.Resources{resource.ClusterType: {xdstest.EDSCluster("c1", "e1")}})
	file := writeFile(t, "node: {id: from-file}\n")
	r := startRun(t, "--config", file, "--node-id", "xds-relay-7f9c", "--listen", "127.0.0.1:0", "--admin", "",
		"--upstream", up.Addr())

	c := xdstest.DialADS(t, r.Listen, &core.Node{Id: "envoy-1"})
	c.Subscribe(resource.ClusterType, "c1")
	c.Ack(c.RecvType(resource.ClusterType))
	mu.Lock()
	defer mu.Unlock()
	if !seen["xds-relay-7f9c"] || seen["from-file"] {
		t.Errorf("node ids the upstream saw = %v, want xds-relay-7f9c and not the file's from-file", seen)
	}
}
