// Package atomicfile writes files that are never seen half-written: a
// temporary file beside the target, synced and renamed over it, so a crash
// leaves the old file or the new one. Writer rewrites a file after changes,
// at most once per interval, for the warm-restart caches.
//
// WriteFile is safe for concurrent use on different paths. A Writer's
// methods are safe for concurrent use; its goroutine ends with Close.
package atomicfile

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// tmpInfix separates the target's name from the random part of a temporary
// file's name.
const tmpInfix = ".tmp-"

// WriteFile writes data to path atomically. While it writes, the directory
// holds the old file and the new one: twice the file's size.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+tmpInfix+"*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("atomicfile: %w", err)
	}
	return nil
}

// removeTemps removes the temporary files of path that a crash during
// WriteFile left behind, and returns how many it removed.
func removeTemps(path string) int {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return 0
	}
	n := 0
	prefix := filepath.Base(path) + tmpInfix
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), prefix) &&
			os.Remove(filepath.Join(filepath.Dir(path), e.Name())) == nil {
			n++
		}
	}
	return n
}

// DefaultInterval is WriterOptions.Interval's default.
const DefaultInterval = time.Second

// maxSettle bounds how long a Writer waits after a change that follows a
// quiet spell, so that a burst of changes makes one write.
const maxSettle = time.Second

// Result is what one write of a Writer did.
type Result struct {
	// Bytes is the size of the content.
	Bytes int
	// Unchanged: the content was what the Writer last wrote, so the file was
	// left alone.
	Unchanged bool
	// Err is why the write failed; nil when it did not.
	Err error
}

// Clock is the time a Writer schedules by; tests give their own.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// WriterOptions configure a Writer. Zero values take the documented defaults.
type WriterOptions struct {
	// Interval is the least time from the start of one write to the start of
	// the next, and the most a change waits to be written: a crash loses at
	// most the changes of the last Interval and of the write in progress.
	// Default DefaultInterval.
	Interval time.Duration
	// OnWrite, when set, is called after each write from the Writer's
	// goroutine (metrics).
	OnWrite func(Result)
	// Logger gets failed writes at Warn. Default: none.
	Logger *zap.Logger
	// Clock is the time the Writer schedules by. Default: the system's.
	Clock Clock
}

// Writer rewrites a file with the bytes content returns after a Touch — at
// most once per interval, and not when the bytes are those it last wrote —
// and once more at Close.
type Writer struct {
	// set at creation, read-only
	path    string
	content func() []byte
	opts    WriterOptions
	settle  time.Duration // the wait after a change that follows a quiet spell

	wake chan struct{} // one slot: something changed
	stop chan struct{}
	done chan struct{}

	// owned by the run goroutine
	last    time.Time // when the last write started; zero: none yet
	written *[sha256.Size]byte
}

// NewWriter removes what a crash left of earlier writes to path (their
// temporary files) and starts a Writer of path.
func NewWriter(path string, content func() []byte, opts WriterOptions) *Writer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if n := removeTemps(path); n > 0 {
		opts.Logger.Info("removed the temporary files of an interrupted write", zap.String("path", path), zap.Int("files", n))
	}
	w := &Writer{path: path, content: content, opts: opts, settle: min(opts.Interval, maxSettle),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Touch notes a change; it never blocks.
func (w *Writer) Touch() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close writes the file one last time and stops the Writer.
func (w *Writer) Close() {
	close(w.stop)
	<-w.done
}

func (w *Writer) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			w.write()
			return
		case <-w.wake:
		}
		select {
		case <-w.stop:
			w.write()
			return
		case <-w.opts.Clock.After(w.wait()):
		}
		w.write()
	}
}

// wait is how long a change noted now waits for its write: settle, and no
// less than what is left of the interval since the last write.
func (w *Writer) wait() time.Duration {
	d := w.settle
	if !w.last.IsZero() {
		d = max(d, w.opts.Interval-w.opts.Clock.Now().Sub(w.last))
	}
	return d
}

func (w *Writer) write() {
	select { // the changes noted until now are in this write
	case <-w.wake:
	default:
	}
	data := w.content()
	r := Result{Bytes: len(data)}
	sum := sha256.Sum256(data)
	if w.written != nil && *w.written == sum {
		r.Unchanged = true
	} else {
		w.last = w.opts.Clock.Now()
		if r.Err = WriteFile(w.path, data); r.Err == nil {
			w.written = &sum
		} else {
			w.written = nil
			w.opts.Logger.Warn("cannot write the warm-restart file", zap.String("path", w.path), zap.Error(r.Err))
		}
	}
	if w.opts.OnWrite != nil {
		w.opts.OnWrite(r)
	}
}
