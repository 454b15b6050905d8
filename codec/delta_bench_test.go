package codec

import (
	"fmt"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
)

func BenchmarkAppendDelta(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		flows := deltaFlows(fullFlows(n))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := AppendDelta(nil, 1, flows)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				buf = AppendDelta(buf[:0], 1, flows)
			}
			perFlow(b, n)
		})
	}
}

func BenchmarkDecodeDelta(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		body := AppendDelta(nil, 1, deltaFlows(fullFlows(n)))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			var dst []flowstate.Flow
			for b.Loop() {
				var err error
				if _, dst, err = DecodeDelta(body, dst); err != nil {
					b.Fatal(err)
				}
			}
			perFlow(b, n)
		})
	}
}

// BenchmarkSplitAggregate splits 1,000,000 flows into chunks of 1 MB, as a
// chunked get of that state does.
func BenchmarkSplitAggregate(b *testing.B) {
	flows := fullFlows(1_000_000)
	var ends []int
	for b.Loop() {
		var err error
		if ends, err = SplitAggregate(ends, flows, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ends)), "chunks")
	perFlow(b, len(flows))
}
