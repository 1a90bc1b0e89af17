package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram layout: values below 2^histSubBits are exact; above, each power of
// two is split into 2^histSubBits buckets, so a bucket's width is at most 1/32 of
// its lower bound (about 3 % relative error).
const (
	histSubBits  = 5
	histSubCount = 1 << histSubBits
	histBuckets  = (64 - histSubBits + 1) * histSubCount
)

// histogram is a log-linear histogram of durations, safe for concurrent use
// (atomics only, so the hot path never takes a lock).
type histogram struct {
	counts [histBuckets]atomic.Uint64
	total  atomic.Uint64
	max    atomic.Int64
}

// bucketOf returns the bucket index of v.
func bucketOf(v uint64) int {
	if v < histSubCount {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // ≥ 0
	return (shift+1)*histSubCount + int(v>>shift) - histSubCount
}

// bucketRange returns the smallest and largest value of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < histSubCount {
		return uint64(i), uint64(i)
	}
	shift := i/histSubCount - 1
	lo = uint64(histSubCount+i%histSubCount) << shift
	return lo, lo + (1 << shift) - 1
}

// Record adds one sample; negative durations (clock skew) count as 0.
func (h *histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))].Add(1)
	h.total.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Count returns the number of samples.
func (h *histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest sample.
func (h *histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the q-quantile (0 < q ≤ 1) within the bucket's relative error,
// never above Max; 0 without samples.
func (h *histogram) Quantile(q float64) time.Duration {
	total := h.total.Load()
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(1, min(rank, total))
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := bucketRange(i)
			return min(time.Duration(lo+(hi-lo)/2), h.Max())
		}
	}
	return h.Max()
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
}
