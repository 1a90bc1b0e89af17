package main

import (
	"strings"
	"testing"
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
