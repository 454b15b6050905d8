package latency

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The histogram's range, in microseconds, and precision.
const (
	lowest  = 1
	highest = int64(time.Hour / time.Microsecond)
	digits  = 3
)

// Recorder counts durations. The zero value is ready to use; it is safe for
// concurrent use and must not be copied after first use.
type Recorder struct {
	mu  sync.Mutex              // guards h and max
	h   *hdrhistogram.Histogram // nil until the first Record or Merge
	max time.Duration           // exact
}

// Summary is what a Recorder holds, in the numbers reports print.
type Summary struct {
	Count         int64
	P50, P99, Max time.Duration
}

// init allocates the histogram; r.mu must be held.
func (r *Recorder) init() {
	if r.h == nil {
		r.h = hdrhistogram.New(lowest, highest, digits)
	}
}

// Record counts d. A negative d counts as 0.
func (r *Recorder) Record(d time.Duration) {
	us := min(max(int64(d/time.Microsecond), lowest), highest)
	r.mu.Lock()
	r.init()
	_ = r.h.RecordValue(us) // within range by construction
	r.max = max(r.max, d)
	r.mu.Unlock()
}

// Merge adds every duration that from counted to r. from may be recorded to
// meanwhile; r and from must differ.
func (r *Recorder) Merge(from *Recorder) {
	from.mu.Lock()
	var h *hdrhistogram.Histogram
	if from.h != nil {
		h = hdrhistogram.Import(from.h.Export())
	}
	m := from.max
	from.mu.Unlock()
	if h == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.h.Merge(h)
	r.max = max(r.max, m)
}

// Count returns how many durations were recorded.
func (r *Recorder) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return 0
	}
	return r.h.TotalCount()
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the recorded durations,
// never more than the maximum; 0 when none was recorded.
func (r *Recorder) Quantile(q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.quantile(q)
}

// quantile is Quantile; r.mu must be held.
func (r *Recorder) quantile(q float64) time.Duration {
	if r.h == nil || r.h.TotalCount() == 0 {
		return 0
	}
	d := time.Duration(r.h.ValueAtQuantile(100*q)) * time.Microsecond
	return min(d, r.max)
}

// Max returns the largest duration recorded, exactly; 0 when none was.
func (r *Recorder) Max() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max
}

// Summary returns the count, median, 99th percentile and maximum.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return Summary{}
	}
	return Summary{Count: r.h.TotalCount(), P50: r.quantile(0.50), P99: r.quantile(0.99), Max: r.max}
}
