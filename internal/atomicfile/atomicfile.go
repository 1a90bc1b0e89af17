// Package atomicfile writes files that are never seen half-written: a
// temporary file beside the target, synced and renamed over it, so a crash
// leaves the old file or the new one. Writer rewrites a file after changes,
// debounced, for the warm-restart caches.
//
// WriteFile is safe for concurrent use on different paths. A Writer's
// methods are safe for concurrent use; its goroutine ends with Close.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
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

// Writer rewrites a file with the bytes content returns, within debounce of
// a Touch, and once more at Close.
type Writer struct {
	// set at creation, read-only
	path     string
	debounce time.Duration
	content  func() []byte
	log      *zap.Logger

	wake chan struct{} // one slot: something changed
	stop chan struct{}
	done chan struct{}
}

// NewWriter starts a Writer of path. Write failures are logged at Warn.
func NewWriter(path string, debounce time.Duration, content func() []byte, log *zap.Logger) *Writer {
	w := &Writer{path: path, debounce: debounce, content: content, log: log,
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
		t := time.NewTimer(w.debounce)
		select {
		case <-w.stop:
			t.Stop()
			w.write()
			return
		case <-t.C:
		}
		w.write()
	}
}

func (w *Writer) write() {
	if err := WriteFile(w.path, w.content()); err != nil {
		w.log.Warn("cannot write the warm-restart file", zap.String("path", w.path), zap.Error(err))
	}
}
