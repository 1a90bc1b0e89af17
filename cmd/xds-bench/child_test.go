package main

import (
	"errors"
	"testing"
	"time"
)

func TestWrittenBy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	series := []procSample{
		{At: at(0), Wchr: 1000},
		{At: at(10), Wchr: 1000},
		{At: at(20), Wchr: 50000},
		{At: at(30), Wchr: 100900}, // 99 % of the 100,000 bytes written by the end
		{At: at(40), Wchr: 100950},
		{At: at(50), Wchr: 101000}, // ACK-phase crumbs
	}
	if got, ok := writtenBy(series, 0.99); !ok || !got.Equal(at(30)) {
		t.Errorf("writtenBy(0.99) = %v, %v; want +30ms", got.Sub(t0), ok)
	}
	if got, ok := writtenBy(series, 1); !ok || !got.Equal(at(50)) {
		t.Errorf("writtenBy(1) = %v, %v; want +50ms", got.Sub(t0), ok)
	}
	if _, ok := writtenBy(series[:1], 0.99); ok {
		t.Error("one sample: ok")
	}
	if _, ok := writtenBy([]procSample{{At: at(0), Wchr: 5}, {At: at(10), Wchr: 5}}, 0.99); ok {
		t.Error("no writes: ok")
	}
}

func TestQuietSince(t *testing.T) {
	from := []procSample{{CPU: 0}, {CPU: 100 * time.Millisecond}}
	if !quietSince(from, []procSample{{CPU: clockTick}, {CPU: 100 * time.Millisecond}}) {
		t.Error("one tick: not quiet")
	}
	if quietSince(from, []procSample{{CPU: 0}, {CPU: 100*time.Millisecond + 2*clockTick}}) {
		t.Error("two ticks: quiet")
	}
}

// A child that lost its port to another process between the pick and its
// bind is started again on new ports; any other failure is final.
func TestWithFreePortsRetriesATakenPort(t *testing.T) {
	var seen [][]string
	err := withFreePorts(2, func(a []string) error {
		seen = append(seen, a)
		if len(seen) == 1 {
			return errors.New("bench: democp exited: listen tcp " + a[0] + ": bind: address already in use")
		}
		return nil
	})
	if err != nil || len(seen) != 2 || len(seen[1]) != 2 {
		t.Fatalf("withFreePorts: err %v after %d tries (%v), want success on the second", err, len(seen), seen)
	}
	tries := 0
	err = withFreePorts(1, func([]string) error { tries++; return errors.New("bench: democp exited: no such file") })
	if err == nil || tries != 1 {
		t.Fatalf("withFreePorts: err %v after %d tries, want the first failure", err, tries)
	}
}
