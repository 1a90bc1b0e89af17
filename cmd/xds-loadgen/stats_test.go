package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.9: 9, 0.99: 10, 1: 10, 0.01: 1, 0: 1} {
		if got := percentile(s, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestHistogramQuantiles(t *testing.T) {
	h := newHistogram()
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram not zero")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var samples []time.Duration
	for range 20000 {
		// Log-uniform from 1µs to ~10s.
		d := time.Duration(float64(time.Microsecond) * math.Pow(10, r.Float64()*7))
		samples = append(samples, d)
		h.Record(d)
	}
	h.Record(-time.Second) // clock skew counts as 0
	samples = append(samples, 0)
	slices.Sort(samples)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		want, got := percentile(samples, q), h.Quantile(q)
		// 3 significant digits: within 0.1 %.
		if diff := float64(got-want) / float64(want); diff > 1e-3 || diff < -1e-3 {
			t.Errorf("q%v = %v, exact %v (%.1f%% off)", q, got, want, 100*diff)
		}
	}
	if h.Max() != samples[len(samples)-1] || h.Count() != uint64(len(samples)) {
		t.Errorf("max %v count %d, want %v %d", h.Max(), h.Count(), samples[len(samples)-1], len(samples))
	}
	// Small exact values.
	e := newHistogram()
	for _, d := range []time.Duration{3, 3, 7} {
		e.Record(d)
	}
	if e.Quantile(0.5) != 3 || e.Quantile(1) != 7 {
		t.Errorf("exact small values: p50 %v p100 %v", e.Quantile(0.5), e.Quantile(1))
	}
}

func TestPicked(t *testing.T) {
	for _, tc := range []struct {
		n     int
		ratio float64
		want  int
	}{{100, 0, 0}, {100, 1, 100}, {100, 0.1, 10}, {50, 0.25, 12}, {7, 0.5, 3}, {3, 0.1, 0}} {
		got := 0
		for i := range tc.n {
			if picked(i, tc.ratio) {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("picked(%d clients, %v) = %d, want %d", tc.n, tc.ratio, got, tc.want)
		}
	}
	// Spread out: a quarter picks every fourth client.
	for i := range 8 {
		if picked(i, 0.25) != (i%4 == 3) {
			t.Errorf("picked(%d, 0.25) = %v", i, picked(i, 0.25))
		}
	}
}

// Each change's samples stay apart, by stamp, oldest first; stamps beyond
// maxChanges are dropped (they are in the run's overall histogram).
func TestChangeStats(t *testing.T) {
	c := newChangeStats()
	for i := range 10 {
		c.Record(200, time.Duration(i+1)*time.Millisecond)
	}
	c.Record(100, 5*time.Millisecond)
	got := c.Latencies()
	if len(got) != 2 || got[0].CreatedUnixNano != 100 || got[1].CreatedUnixNano != 200 {
		t.Fatalf("changes %+v, want stamps 100 and 200", got)
	}
	if l := got[1].Latencies; l.Samples != 10 || l.Max != 10 || math.Abs(l.P50-5) > 0.01 {
		t.Errorf("stamp 200: %+v, want 10 samples, p50 5 ms (within 0.1 %%), max 10 ms", l)
	}
	for stamp := range int64(2 * maxChanges) {
		c.Record(1000+stamp, time.Millisecond)
	}
	if n := len(c.Latencies()); n != maxChanges {
		t.Errorf("%d changes kept, want %d", n, maxChanges)
	}
}
