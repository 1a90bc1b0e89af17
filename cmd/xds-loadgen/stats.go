package main

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// histogram records durations in HdrHistogram (github.com/HdrHistogram/
// hdrhistogram-go): 3 significant digits (0.1 % relative error), from 1 ns
// to an hour. An HdrHistogram is not safe for concurrent use and thousands of
// clients record into this one, so the samples are spread over a few shards,
// each with its mutex, and merged to answer Quantile. Safe for concurrent use.
type histogram struct {
	next   atomic.Uint32 // the shard of the next sample
	total  atomic.Uint64
	max    atomic.Int64
	shards []histShard // set at creation
}

type histShard struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram // guarded by mu
}

const (
	histShards  = 8
	histHighest = int64(time.Hour)
	histDigits  = 3
)

func newHistogram() *histogram { return newShardedHistogram(histShards) }

// newShardedHistogram returns a histogram of n shards (about 270 KiB each).
func newShardedHistogram(n int) *histogram {
	h := &histogram{shards: make([]histShard, n)}
	for i := range h.shards {
		h.shards[i].h = hdrhistogram.New(1, histHighest, histDigits)
	}
	return h
}

// Record adds one sample; negative durations (clock skew) count as 0, those
// above an hour as an hour.
func (h *histogram) Record(d time.Duration) {
	v := min(max(int64(d), 0), histHighest)
	s := &h.shards[h.next.Add(1)%uint32(len(h.shards))]
	s.mu.Lock()
	_ = s.h.RecordValue(v) // v is within the trackable range
	s.mu.Unlock()
	h.total.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count returns the number of samples.
func (h *histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest sample.
func (h *histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the q-quantile (0 < q ≤ 1) within HdrHistogram's
// precision, never above Max; 0 without samples.
func (h *histogram) Quantile(q float64) time.Duration {
	all := hdrhistogram.New(1, histHighest, histDigits)
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		all.Merge(s.h)
		s.mu.Unlock()
	}
	if all.TotalCount() == 0 {
		return 0
	}
	return min(time.Duration(all.ValueAtQuantile(100*q)), h.Max())
}

// maxChanges bounds the changes changeStats keeps apart.
const maxChanges = 32

// changeStats keeps the propagation of each change apart: a histogram per
// creation stamp (one stamp per change of xds-democp), for the first
// maxChanges stamps recorded; later ones are only in the run's overall
// histogram. A benchmark reads the change it made by its stamp. Safe for
// concurrent use.
type changeStats struct {
	mu      sync.RWMutex
	byStamp map[int64]*histogram // guarded by mu
}

func newChangeStats() *changeStats { return &changeStats{byStamp: map[int64]*histogram{}} }

// Record adds one sample of the change stamped stamp.
func (c *changeStats) Record(stamp int64, d time.Duration) {
	c.mu.RLock()
	h := c.byStamp[stamp]
	c.mu.RUnlock()
	if h == nil {
		c.mu.Lock()
		if h = c.byStamp[stamp]; h == nil && len(c.byStamp) < maxChanges {
			h = newShardedHistogram(1) // one sample per client and change: little contention
			c.byStamp[stamp] = h
		}
		c.mu.Unlock()
		if h == nil {
			return
		}
	}
	h.Record(d)
}

// Latencies returns the latencies of every change kept, oldest stamp first.
func (c *changeStats) Latencies() []ChangeLatencies {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]ChangeLatencies, 0, len(c.byStamp))
	for stamp, h := range c.byStamp {
		out = append(out, ChangeLatencies{CreatedUnixNano: stamp, Latencies: latencies(h)})
	}
	slices.SortFunc(out, func(a, b ChangeLatencies) int { return cmp.Compare(a.CreatedUnixNano, b.CreatedUnixNano) })
	return out
}

// percentile returns the exact q-quantile (nearest rank) of sorted samples; 0 when empty.
// It is the reference the histogram approximates.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// counters are the engine-wide totals, updated by every client.
type counters struct {
	launched      atomic.Int64 // clients started
	connected     atomic.Int64 // clients with an open stream
	synced        atomic.Int64 // clients that have synced (ever)
	connectErrors atomic.Int64 // streams that could not be opened or failed before their first response
	streamErrors  atomic.Int64 // streams that failed after their first response
	responses     atomic.Int64
	updates       atomic.Int64 // changed or new resources received after the client synced
	nacks         atomic.Int64 // NACKs sent
	bytes         atomic.Int64 // wire bytes received (gRPC payloads)
	losses        atomic.Int64 // resources a client held that the server said are gone (see Loss)
	lrsStreams    atomic.Int64 // clients with an answered LRS stream (Config.LoadReport)
	lrsReports    atomic.Int64 // load reports sent
	lrsErrors     atomic.Int64 // LRS streams that failed or could not be opened
}
