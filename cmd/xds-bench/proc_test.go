package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 101 and stime 56 ticks.
	stat := "4242 (xds relay (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 101 56 0 0 20 0 12 0 9000 1000 200 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 157 * 10 * time.Millisecond; got != want {
		t.Errorf("parseStatCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 56 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("parseStatCPU(%q) = %v, want a bench: error", bad, err)
		}
	}
}

func TestParseStatusAndIO(t *testing.T) {
	status := "Name:\txds-relay\nVmPeak:\t  999 kB\nVmRSS:\t  175876 kB\nThreads:\t12\n"
	if got, err := parseStatusField([]byte(status), "VmRSS"); err != nil || got != 175876*1024 {
		t.Errorf("VmRSS = %d, %v", got, err)
	}
	if got, err := parseStatusField([]byte(status), "Threads"); err != nil || got != 12 {
		t.Errorf("Threads = %d, %v", got, err)
	}
	if _, err := parseStatusField([]byte(status), "VmSwap"); err == nil {
		t.Error("missing field: no error")
	}
	if _, err := parseStatusField([]byte("VmRSS: 12 MB\n"), "VmRSS"); err == nil {
		t.Error("unknown unit: no error")
	}
	io := "rchar: 6976\nwchar: 1234567\nsyscr: 10\n"
	if got, err := parseIOField([]byte(io), "wchar"); err != nil || got != 1234567 {
		t.Errorf("wchar = %d, %v", got, err)
	}
	if _, err := parseIOField([]byte(io), "read_bytes"); err == nil {
		t.Error("missing field: no error")
	}
	if _, err := parseIOField([]byte("wchar: x\n"), "wchar"); err == nil {
		t.Error("bad number: no error")
	}
}

func TestCountEstablished(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4650 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4650 0100007F:E7E0 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:4650 0100007F:E7E2 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:4650 0100007F:E7E4 06 00000000:00000000 03:000005C2 00000000     0        0 0 3 0000000000000000
   4: 0100007F:E7E0 0100007F:4650 01 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 20 4 30 10 -1
`
	// The process owns the listener (1001), two accepted connections (1002, 1003); 2002 is another process's.
	got, err := countEstablished(strings.NewReader(table), map[uint64]bool{1001: true, 1002: true, 1003: true})
	if err != nil || got != 2 {
		t.Errorf("countEstablished = %d, %v; want 2", got, err)
	}
	for link, want := range map[string]uint64{"socket:[1002]": 1002, "pipe:[5]": 0, "socket:[x]": 0, "/dev/null": 0} {
		if got, ok := socketInode(link); got != want || ok != (want != 0) {
			t.Errorf("socketInode(%q) = %d, %v", link, got, ok)
		}
	}
}

func TestParseCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := parseCPUModel([]byte(info)); got != "AMD EPYC 7B13" {
		t.Errorf("parseCPUModel = %q", got)
	}
	if got := parseCPUModel(nil); got != "unknown" {
		t.Errorf("parseCPUModel(nil) = %q", got)
	}
}

// TestSampleProcSelf reads this test process's own counters.
func TestSampleProcSelf(t *testing.T) {
	s, err := sampleProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS == 0 || s.Rchr == 0 {
		t.Errorf("sample %+v: want a non-zero RSS and rchar", s)
	}
	if _, err := establishedConns(os.Getpid()); err != nil {
		t.Errorf("establishedConns: %v", err)
	}
	if _, err := sampleProc(-1); err == nil {
		t.Error("sampleProc(-1) succeeded")
	}
}
