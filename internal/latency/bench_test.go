package latency_test

import (
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/latency"
)

// durations are the recorded values: acks from 50 µs to about 60 ms.
func duration(i int) time.Duration { return time.Duration(50+(i*7919)%60000) * time.Microsecond }

// BenchmarkRecord compares the Recorder with the former atomic histogram,
// recorded from one goroutine and from GOMAXPROCS goroutines at once, and
// a Recorder per goroutine merged at the end.
func BenchmarkRecord(b *testing.B) {
	b.Run("hdr-mutex/serial", func(b *testing.B) {
		var r latency.Recorder
		for i := 0; b.Loop(); i++ {
			r.Record(duration(i))
		}
	})
	b.Run("atomic-buckets/serial", func(b *testing.B) {
		h := new(histogram)
		for i := 0; b.Loop(); i++ {
			h.record(duration(i))
		}
	})
	b.Run("hdr-mutex/parallel", func(b *testing.B) {
		var r latency.Recorder
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				r.Record(duration(i))
			}
		})
	})
	b.Run("atomic-buckets/parallel", func(b *testing.B) {
		h := new(histogram)
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				h.record(duration(i))
			}
		})
	})
	b.Run("hdr-per-goroutine/parallel", func(b *testing.B) {
		var total latency.Recorder
		b.RunParallel(func(pb *testing.PB) {
			var r latency.Recorder
			for i := 0; pb.Next(); i++ {
				r.Record(duration(i))
			}
			total.Merge(&r)
		})
	})
}

// BenchmarkSummary is the cost of reading p50, p99 and max once.
func BenchmarkSummary(b *testing.B) {
	var r latency.Recorder
	h := new(histogram)
	for i := range 100000 {
		r.Record(duration(i))
		h.record(duration(i))
	}
	b.Run("hdr", func(b *testing.B) {
		for b.Loop() {
			_ = r.Summary()
		}
	})
	b.Run("atomic-buckets", func(b *testing.B) {
		for b.Loop() {
			_, _ = h.quantile(0.5), h.quantile(0.99)
		}
	})
}

// BenchmarkNew is the cost of a recorder's first record: its allocation.
func BenchmarkNew(b *testing.B) {
	b.Run("hdr", func(b *testing.B) {
		for b.Loop() {
			var r latency.Recorder
			r.Record(time.Millisecond)
		}
	})
	b.Run("atomic-buckets", func(b *testing.B) {
		for b.Loop() {
			h := new(histogram)
			h.record(time.Millisecond)
		}
	})
}
