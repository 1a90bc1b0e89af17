package atomicfile_test

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xds-relay/xds-relay/internal/atomicfile"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a Clock the test moves: each After the Writer asks for is
// handed to the test, which fires it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan fakeWait
}

type fakeWait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), waits: make(chan fakeWait, 8)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.waits <- fakeWait{d: d, fire: ch}
	return ch
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// wait returns the Writer's next wait, failing the test after 10 s without one.
func (c *fakeClock) wait(t *testing.T) fakeWait {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("the Writer asked for no wait")
		return fakeWait{}
	}
}

// noWait fails the test if the Writer asks for a wait within a short time.
func (c *fakeClock) noWait(t *testing.T) {
	t.Helper()
	select {
	case w := <-c.waits:
		t.Fatalf("the Writer waits %v with nothing to write", w.d)
	case <-time.After(50 * time.Millisecond):
	}
}

// writerHarness runs a Writer of a file in a temporary directory whose
// content the test sets, and records each round's Result.
type writerHarness struct {
	path    string
	clock   *fakeClock
	w       *atomicfile.Writer
	mu      sync.Mutex
	content string
	results chan atomicfile.Result
}

func newWriterHarness(t *testing.T, path string, interval time.Duration) *writerHarness {
	h := &writerHarness{path: path, clock: newFakeClock(), content: "v1", results: make(chan atomicfile.Result, 8)}
	h.w = atomicfile.NewWriter(path, func() []byte {
		h.mu.Lock()
		defer h.mu.Unlock()
		return []byte(h.content)
	}, atomicfile.WriterOptions{Interval: interval, Clock: h.clock, OnWrite: func(r atomicfile.Result) { h.results <- r }})
	return h
}

func (h *writerHarness) set(content string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.content = content
}

func (h *writerHarness) result(t *testing.T) atomicfile.Result {
	t.Helper()
	select {
	case r := <-h.results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no write")
		return atomicfile.Result{}
	}
}

func (h *writerHarness) file(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(h.path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A Writer writes a change after a short settle, then at most once per
// interval however often it is touched, leaves the file alone when nothing
// changed, and writes at Close without waiting; no temporary file is left.
func TestWriterSchedule(t *testing.T) {
	dir := t.TempDir()
	h := newWriterHarness(t, filepath.Join(dir, "f"), 10*time.Second)
	h.clock.noWait(t) // nothing changed: nothing to write

	h.w.Touch()
	if w := h.clock.wait(t); w.d != time.Second {
		t.Fatalf("first change waits %v, want the 1s settle", w.d)
	} else {
		h.clock.advance(w.d)
		w.fire <- h.clock.Now()
	}
	if r := h.result(t); r.Err != nil || r.Unchanged || r.Bytes != 2 {
		t.Fatalf("first write %+v, want 2 bytes written", r)
	}
	if got := h.file(t); got != "v1" {
		t.Fatalf("file %q, want v1", got)
	}

	// 3 s after the write, a burst of changes waits for the rest of the
	// interval and makes one write.
	h.clock.advance(3 * time.Second)
	h.set("v2")
	h.w.Touch()
	w := h.clock.wait(t)
	if w.d != 7*time.Second {
		t.Fatalf("a change 3s after a write waits %v, want the 7s left of the interval", w.d)
	}
	h.set("v3")
	h.w.Touch()
	h.w.Touch()
	h.clock.advance(w.d)
	w.fire <- h.clock.Now()
	if r := h.result(t); r.Err != nil || r.Unchanged {
		t.Fatalf("second write %+v", r)
	}
	if got := h.file(t); got != "v3" {
		t.Fatalf("file %q, want v3: the write takes the content of its time", got)
	}
	h.clock.noWait(t) // the touches during the wait are in that write

	// A touch with no change in the content leaves the file alone.
	h.clock.advance(20 * time.Second)
	h.w.Touch()
	w = h.clock.wait(t)
	if w.d != time.Second {
		t.Fatalf("a change long after a write waits %v, want the 1s settle", w.d)
	}
	w.fire <- h.clock.Now()
	if r := h.result(t); !r.Unchanged {
		t.Fatalf("write of the same content %+v, want unchanged", r)
	}

	// Close writes at once, even in the middle of a wait.
	h.set("v4")
	h.w.Touch()
	h.clock.wait(t)
	h.w.Close()
	if r := h.result(t); r.Err != nil || r.Unchanged {
		t.Fatalf("Close write %+v", r)
	}
	if got := h.file(t); got != "v4" {
		t.Fatalf("file %q after Close, want v4", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d entries in the directory, want the file only", len(entries))
	}
}

// A failed write is reported, with its error, and tried again at the next
// round even when the content did not change.
func TestWriterFailure(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	h := newWriterHarness(t, filepath.Join(sub, "f"), time.Second)
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	h.w.Touch()
	w := h.clock.wait(t)
	w.fire <- h.clock.Now()
	if r := h.result(t); r.Err == nil {
		t.Fatalf("write into a removed directory %+v, want an error", r)
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	h.w.Close()
	if r := h.result(t); r.Err != nil || r.Unchanged {
		t.Fatalf("write after the failure %+v, want the same content written", r)
	}
	if got := h.file(t); got != "v1" {
		t.Fatalf("file %q, want v1", got)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

// NewWriter removes the temporary files an interrupted write left beside
// its file, and only those.
func TestNewWriterRemovesTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"f", "f.tmp-123", "f.tmp-456", "f.gateway", "f.gateway.tmp-789"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := newWriterHarness(t, filepath.Join(dir, "f"), time.Second)
	h.w.Close()
	h.result(t)
	var got []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"f", "f.gateway", "f.gateway.tmp-789"}
	if !slices.Equal(got, want) {
		t.Fatalf("directory %v, want %v", got, want)
	}
}
