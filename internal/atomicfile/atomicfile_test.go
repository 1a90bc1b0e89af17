package atomicfile_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/internal/atomicfile"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Writer writes after a Touch and at Close, leaving no temporary file; a
// write into a missing directory fails without a trace.
func TestWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var n atomic.Int32
	wrote := make(chan struct{}, 2)
	w := atomicfile.NewWriter(path, 10*time.Millisecond, func() []byte {
		wrote <- struct{}{}
		return []byte("v" + string(rune('0'+n.Add(1))))
	}, zap.NewNop())
	w.Touch()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("no write after a Touch")
	}
	w.Close()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "v2" {
		t.Fatalf("file %q (%v), want the Close write v2", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d entries in the directory, want the file only", len(entries))
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
