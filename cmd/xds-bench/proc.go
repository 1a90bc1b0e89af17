package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the length of one USER_HZ tick, the unit of utime and stime in
// /proc/PID/stat. It is 100 Hz on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procSample is one reading of a process's counters.
type procSample struct {
	At   time.Time
	CPU  time.Duration // utime + stime
	RSS  uint64        // VmRSS, bytes
	Rchr uint64        // rchar: bytes read by read-like syscalls (sockets included)
	Wchr uint64        // wchar: bytes written by write-like syscalls (sockets included)
}

// sampleProc reads /proc/PID/{stat,status,io}.
func sampleProc(pid int) (procSample, error) {
	s := procSample{At: time.Now()}
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return s, fmt.Errorf("bench: %w", err)
	}
	if s.CPU, err = parseStatCPU(b); err != nil {
		return s, err
	}
	if b, err = os.ReadFile(dir + "/status"); err != nil {
		return s, fmt.Errorf("bench: %w", err)
	}
	if s.RSS, err = parseStatusField(b, "VmRSS"); err != nil {
		return s, err
	}
	if b, err = os.ReadFile(dir + "/io"); err != nil {
		return s, fmt.Errorf("bench: %w", err)
	}
	if s.Rchr, err = parseIOField(b, "rchar"); err != nil {
		return s, err
	}
	if s.Wchr, err = parseIOField(b, "wchar"); err != nil {
		return s, err
	}
	return s, nil
}

// parseStatCPU returns utime+stime from the contents of /proc/PID/stat. The
// command name (field 2) is in parentheses and may contain spaces and
// parentheses, so the fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat: no command name in %q", truncate(b))
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: field 3 (state) is f[0], so field n is f[n-3]; utime is 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc stat: cpu field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// parseStatusField returns a "Name:   123 kB" field of /proc/PID/status in bytes.
func parseStatusField(b []byte, name string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc status %s: %w", name, err)
		}
		if len(f) > 1 {
			switch f[1] {
			case "kB":
				n <<= 10
			default:
				return 0, fmt.Errorf("bench: /proc status %s: unknown unit %q", name, f[1])
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("bench: /proc status: no %s", name)
}

// parseIOField returns a "name: 123" field of /proc/PID/io.
func parseIOField(b []byte, name string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc io %s: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("bench: /proc io: no %s", name)
}

// establishedConns counts the process's TCP sockets (IPv4 and IPv6) in state
// ESTABLISHED: its socket inodes from /proc/PID/fd matched against the
// network namespace's connection tables.
func establishedConns(pid int) (int, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	inodes := make(map[uint64]bool, len(ents))
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, "fd", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := socketInode(l); ok {
			inodes[ino] = true
		}
	}
	n := 0
	for _, table := range []string{"/net/tcp", "/net/tcp6"} {
		f, err := os.Open(dir + table)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return 0, fmt.Errorf("bench: %w", err)
		}
		c, err := countEstablished(f, inodes)
		_ = f.Close()
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// socketInode parses an fd link target like "socket:[12345]".
func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// countEstablished counts the rows of a /proc/net/tcp table in state 01
// (ESTABLISHED) whose inode is in inodes.
func countEstablished(r io.Reader, inodes map[uint64]bool) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for first := true; sc.Scan(); first = false {
		if first {
			continue // header
		}
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if len(f) < 10 {
			continue
		}
		if f[3] != "01" {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc net tcp inode %q: %w", f[9], err)
		}
		if inodes[ino] {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("bench: /proc net tcp: %w", err)
	}
	return n, nil
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	return parseCPUModel(b)
}

// parseCPUModel returns the first "model name" in cpuinfo contents, or "unknown".
func parseCPUModel(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func truncate(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}
