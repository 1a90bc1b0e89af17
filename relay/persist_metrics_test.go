package relay_test

import (
	"os"
	"path/filepath"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// The warm-restart files' writes are counted by result from 0, and the size
// of the file last written is a gauge: a write that fails (here: the
// volume's directory is gone) is an error an alert sees, not only a log line.
func TestWarmFileWritesCounted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volume")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cache")
	withPersist := xdstest.WithConfig(func(c *config.Config) { c.Cache.PersistPath = path })
	up := xdstest.StartUpstream(t)
	up.SetResources(clusters("c1", "c2"))

	first := xdstest.StartRelay(t, up.Addr(), withPersist)
	for _, file := range []string{"cache", "gateway"} {
		for _, result := range []string{"ok", "error", "unchanged"} {
			if got := metricValue(t, first.Relay, "xds_relay_warm_file_writes_total", map[string]string{"file": file, "result": result}); got != 0 {
				t.Errorf("writes_total{file=%s,result=%s} = %v at the start, want 0", file, result, got)
			}
		}
	}
	c := xdstest.DialADS(t, first.Addr(), &core.Node{Id: "n"})
	c.Subscribe(resource.ClusterType, "*")
	wantNames(t, c.RecvType(resource.ClusterType), "c1", "c2")
	c.Close()
	if err := first.Close(); err != nil { // writes the file
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, first.Relay, "xds_relay_warm_file_writes_total", map[string]string{"file": "cache", "result": "ok"}); got < 1 {
		t.Errorf("writes_total{file=cache,result=ok} = %v after Close, want at least 1", got)
	}
	if got := metricValue(t, first.Relay, "xds_relay_warm_file_bytes", map[string]string{"file": "cache"}); got != float64(st.Size()) {
		t.Errorf("warm_file_bytes{file=cache} = %v, want the file's %d bytes", got, st.Size())
	}

	second := xdstest.StartRelay(t, up.Addr(), withPersist)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(); err != nil { // fails to write both files
		t.Fatal(err)
	}
	for _, file := range []string{"cache", "gateway"} {
		if got := metricValue(t, second.Relay, "xds_relay_warm_file_writes_total", map[string]string{"file": file, "result": "error"}); got < 1 {
			t.Errorf("writes_total{file=%s,result=error} = %v after a failed write, want at least 1", file, got)
		}
	}
}
