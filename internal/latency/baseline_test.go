package latency_test

// The load generator's former recorder (client/histogram.go before the
// latency package), kept as the baseline of the benchmarks: 28,672 atomic
// microsecond buckets, lock-free.

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latencies are counted in microsecond buckets: exact below 1024µs, then
// 512 buckets per power of two (within 0.2%).
const (
	histLinear  = 1024
	histSub     = 512
	histBuckets = histLinear + 54*histSub
)

// histogram counts durations; it is safe for concurrent use and does not
// allocate on record.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64 // nanoseconds, exact
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d/time.Microsecond))].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

func bucketOf(us uint64) int {
	if us < histLinear {
		return int(us)
	}
	e := bits.Len64(us) - 10 // ≥ 1; us>>e is in [512, 1024)
	return histLinear + (e-1)*histSub + int(us>>e) - histSub
}

// bucketMid returns the middle of bucket i.
func bucketMid(i int) time.Duration {
	if i < histLinear {
		return time.Duration(i) * time.Microsecond
	}
	e := (i-histLinear)/histSub + 1
	m := uint64((i-histLinear)%histSub + histSub)
	lo := m << e
	return time.Duration(lo+(1<<e)/2) * time.Microsecond
}

// quantile returns the q-quantile (0 < q ≤ 1), within the bucket's width,
// and never more than the maximum; 0 when nothing was recorded.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q * float64(n))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		if seen += h.counts[i].Load(); seen >= rank {
			return min(bucketMid(i), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}
