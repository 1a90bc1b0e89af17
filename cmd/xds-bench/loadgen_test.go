package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseProgress(t *testing.T) {
	line := "connected 9998/10000  synced 9990/10000  updates 12345  propagation p50 1.2ms p99 35.01ms  errors 3"
	got, ok := parseProgress(line)
	want := progress{Connected: 9998, Clients: 10000, Synced: 9990, Updates: 12345, Errors: 3}
	if !ok || got != want {
		t.Errorf("parseProgress = %+v, %v; want %+v", got, ok, want)
	}
	for _, l := range []string{"", "2026-11-22T22:00:00Z\tWARN\tstream ended", "connected x/10 synced"} {
		if _, ok := parseProgress(l); ok {
			t.Errorf("parseProgress(%q) matched", l)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var lines []string
	var copyTo strings.Builder
	w := &lineWriter{w: &copyTo, fn: func(l string) { lines = append(lines, l) }}
	for _, chunk := range []string{"conn", "ected 1/2\nsecond\r", "\rthird", "\n", "partial"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"connected 1/2", "second", "third"}; strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", lines, want)
	}
	if copyTo.String() != "connected 1/2\nsecond\r\rthird\npartial" {
		t.Errorf("copy %q", copyTo.String())
	}
}

// Every waiter wakes at each progress line, not one of them.
func TestLoadgenWaiters(t *testing.T) {
	l := &loadgen{fresh: make(chan struct{}), c: &child{done: make(chan struct{})}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.waitFor(ctx, "updates", func(p progress) bool { return p.Updates >= 7 })
			errs <- err
		}()
	}
	l.onLine("connected 1/1  synced 1/1  updates 3  propagation p50 0s p99 0s  errors 0")
	l.onLine("connected 1/1  synced 1/1  updates 7  propagation p50 0s p99 0s  errors 0")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p, err := l.lineSince(ctx, time.Time{})
	if err != nil || p.Updates != 7 || p.At.IsZero() {
		t.Errorf("lineSince = %+v, %v", p, err)
	}
}
