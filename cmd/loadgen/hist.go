package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram records durations in log-linear buckets: 32 sub-buckets per
// power of two, so a reported quantile is within about 3% of the true one.
// Record is lock-free and safe for concurrent use.
type histogram struct {
	counts [64 * subBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
	max    atomic.Int64
}

const (
	subBits    = 5
	subBuckets = 1 << subBits
)

// bucket maps a positive duration in nanoseconds to its bucket index.
func bucket(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	exp := bits.Len64(ns) - 1 - subBits // ns >> exp has subBits+1 bits
	mant := ns >> uint(exp)             // in [subBuckets, 2*subBuckets)
	return (exp+1)*subBuckets + int(mant-subBuckets)
}

// lower returns the smallest duration that falls in bucket i.
func lower(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	exp := i/subBuckets - 1
	mant := uint64(i%subBuckets) + subBuckets
	return mant << uint(exp)
}

// Record adds one duration. Negative durations count as zero.
func (h *histogram) Record(d time.Duration) {
	ns := uint64(max(d, 0))
	h.counts[bucket(ns)].Add(1)
	h.n.Add(1)
	h.sum.Add(ns)
	for {
		m := h.max.Load()
		if int64(ns) <= m || h.max.CompareAndSwap(m, int64(ns)) {
			return
		}
	}
}

// Count returns how many durations were recorded.
func (h *histogram) Count() uint64 { return h.n.Load() }

// Quantile returns the duration below which a fraction q of the recorded
// ones fall (the midpoint of the bucket holding it), or 0 with no data.
func (h *histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := lower(i), lower(i+1)
			mid := time.Duration(lo + (hi-lo)/2)
			return min(mid, time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// Snapshot returns the bucket counts as they are now, for QuantileSince.
func (h *histogram) Snapshot() []uint64 {
	c := make([]uint64, len(h.counts))
	for i := range h.counts {
		c[i] = h.counts[i].Load()
	}
	return c
}

// QuantileSince is Quantile over the durations recorded since prev (a
// Snapshot of h; nil for all of them), and returns that Snapshot's
// successor, so that a caller can ask for one interval after another.
// The midpoint of the bucket is returned, not capped by the maximum.
func (h *histogram) QuantileSince(prev []uint64, q float64) (time.Duration, []uint64) {
	now := h.Snapshot()
	var n uint64
	for i := range now {
		if prev != nil {
			n += now[i] - prev[i]
		} else {
			n += now[i]
		}
	}
	if n == 0 {
		return 0, now
	}
	rank := min(max(uint64(math.Ceil(q*float64(n))), 1), n)
	var seen uint64
	for i := range now {
		c := now[i]
		if prev != nil {
			c -= prev[i]
		}
		seen += c
		if seen >= rank {
			lo, hi := lower(i), lower(i+1)
			return time.Duration(lo + (hi-lo)/2), now
		}
	}
	return 0, now
}

// Mean returns the mean duration, or 0 with no data.
func (h *histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Max returns the largest duration recorded.
func (h *histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// latency is the summary of a histogram that the report prints.
type latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (h *histogram) summary() latency {
	return latency{
		Count: h.Count(),
		P50:   ms(h.Quantile(0.50)),
		P99:   ms(h.Quantile(0.99)),
		P999:  ms(h.Quantile(0.999)),
		Max:   ms(h.Max()),
		Mean:  ms(h.Mean()),
	}
}
