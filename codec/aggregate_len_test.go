package codec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestAggregateLenIsTheEncodedLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	edges := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	ints := []int64{0, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64, math.MaxInt64}
	for _, n := range []int{0, 1, 15, 16, 17, 1000, 70000} {
		flows := make([]flowstate.Flow, n)
		for i := range flows {
			flows[i] = flowstate.Flow{
				ID:           flowstate.FlowID(i * (1 + rng.IntN(100000))),
				Has:          flowstate.Fields(rng.IntN(8)),
				StateSize:    edges[rng.IntN(len(edges))],
				LastExecTime: ints[rng.IntN(len(ints))],
				StartTime:    int64(edges[rng.IntN(len(edges))] >> 1),
			}
		}
		require.Equal(t, len(AppendAggregate(nil, flows)), AggregateLen(flows), "%d flows", n)
	}
}
