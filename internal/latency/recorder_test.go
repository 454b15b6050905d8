package latency_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/latency"
)

func TestEmptyRecorderSaysZero(t *testing.T) {
	var r latency.Recorder
	assert.Zero(t, r.Count())
	assert.Zero(t, r.Quantile(0.99))
	assert.Zero(t, r.Max())
	assert.Equal(t, latency.Summary{}, r.Summary())
}

func TestQuantilesAreTheNearestRankWithinAThousandth(t *testing.T) {
	var r latency.Recorder
	for i := 100; i >= 1; i-- {
		r.Record(time.Duration(i) * time.Millisecond)
	}
	within := func(want, got time.Duration) {
		t.Helper()
		assert.InDelta(t, float64(want), float64(got), float64(want)/1000, "want %v, got %v", want, got)
	}
	within(50*time.Millisecond, r.Quantile(0.5))
	within(99*time.Millisecond, r.Quantile(0.99))
	assert.Equal(t, 100*time.Millisecond, r.Quantile(1), "never above the exact maximum")
	s := r.Summary()
	assert.Equal(t, int64(100), s.Count)
	assert.Equal(t, 100*time.Millisecond, s.Max)
	within(50*time.Millisecond, s.P50)
	within(99*time.Millisecond, s.P99)
}

func TestSmallDurationsAreExactToTheMicrosecond(t *testing.T) {
	var r latency.Recorder
	r.Record(1500 * time.Microsecond)
	r.Record(-time.Second)
	assert.Equal(t, 1500*time.Microsecond, r.Quantile(1))
	assert.Equal(t, time.Microsecond, r.Quantile(0.5), "a negative duration counts as the lowest value")
}

func TestDurationsAboveTheRangeCountAsTheTopWithAnExactMaximum(t *testing.T) {
	var r latency.Recorder
	r.Record(3 * time.Hour)
	assert.Equal(t, int64(1), r.Count())
	assert.Equal(t, 3*time.Hour, r.Max())
	assert.InDelta(t, float64(time.Hour), float64(r.Quantile(0.5)), float64(time.Hour)/1000)
}

func TestMergeAddsCountsAndKeepsTheLargerMaximum(t *testing.T) {
	var a, b, empty latency.Recorder
	for range 10 {
		a.Record(time.Millisecond)
	}
	for range 90 {
		b.Record(5 * time.Millisecond)
	}
	b.Record(time.Second)
	a.Merge(&b)
	a.Merge(&empty)
	assert.Equal(t, int64(101), a.Count())
	assert.Equal(t, time.Second, a.Max())
	assert.InDelta(t, float64(5*time.Millisecond), float64(a.Quantile(0.5)), float64(5*time.Microsecond))
	assert.Equal(t, int64(91), b.Count(), "from is left as it was")

	empty.Merge(&b)
	assert.Equal(t, b.Summary(), empty.Summary())
}

func TestConcurrentRecordsAreAllCounted(t *testing.T) {
	var r latency.Recorder
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				r.Record(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(8000), r.Count())
	assert.Equal(t, 7999*time.Microsecond, r.Max())
}
