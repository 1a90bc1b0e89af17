package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestFormatters(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", -5: "0s", 1234 * time.Nanosecond: "1µs", 1234567 * time.Nanosecond: "1.23ms",
		1234567890 * time.Nanosecond: "1.235s", 90 * time.Second: "1m30s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%d) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func testSummary() *Summary {
	sync := 1234.5
	return &Summary{
		Target: "127.0.0.1:18000", Mode: ModeEnvoy, Protocol: ProtocolDelta, Clients: 10, Connections: 5,
		Synced: 9, Failed: 1, ConnectErrors: 2, Responses: 40, Updates: 30, BytesReceived: 2048,
		Propagation:     Latencies{Samples: 30, P50: 1.5, P90: 2, P99: 3, Max: 4},
		TimeToSyncAllMS: &sync, RunMS: 2000,
	}
}

func TestSummaryTable(t *testing.T) {
	var b bytes.Buffer
	if err := testSummary().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"clients              10\n", "synced               9\n", "failed               1\n",
		"connect errors       2\n", "updates received     30\n", "bytes received       2.0 KiB (2048)\n",
		"propagation p50      1.5ms\n", "propagation p90      2ms\n", "propagation p99      3ms\n",
		"propagation max      4ms\n", "time to sync all     1.235s\n", "mode / protocol      envoy / delta\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	s := testSummary()
	s.TimeToSyncAllMS = nil
	b.Reset()
	if err := s.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "not all clients synced") {
		t.Errorf("table without sync time:\n%s", b.String())
	}
}

func TestSummaryJSON(t *testing.T) {
	var b bytes.Buffer
	if err := testSummary().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	for k, want := range map[string]any{"clients": 10.0, "synced": 9.0, "failed": 1.0, "mode": "envoy",
		"protocol": "delta", "bytes_received": 2048.0, "time_to_sync_all_ms": 1234.5, "updates": 30.0} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	p := m["propagation"].(map[string]any)
	if p["p99_ms"] != 3.0 || p["samples"] != 30.0 {
		t.Errorf("propagation %v", p)
	}
	var back Summary
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Propagation != testSummary().Propagation {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestLatencies(t *testing.T) {
	h := newHistogram()
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond} {
		h.Record(d)
	}
	l := latencies(h)
	if l.Samples != 3 || l.Max != 4 || l.P50 < 1.9 || l.P50 > 2.1 {
		t.Errorf("latencies %+v", l)
	}
}

func TestProgressLine(t *testing.T) {
	p := Progress{Clients: 100, Connected: 90, Synced: 80, Updates: 7, Errors: 1, P50: time.Millisecond, P99: 5 * time.Millisecond}
	want := "connected 90/100  synced 80/100  updates 7  propagation p50 1ms p99 5ms  errors 1"
	if got := p.String(); got != want {
		t.Errorf("progress line\n got %q\nwant %q", got, want)
	}
}
