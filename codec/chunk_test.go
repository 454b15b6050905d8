package codec

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestSplitAggregateChunksFitTheBudgetAndCoverTheAggregate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	states := append(testStates(), randomFlows(rng, 20000, 1<<30), fullFlows(70000))
	var ends []int
	for _, flows := range states {
		for _, budget := range []int{100, 1000, 64 << 10, 1 << 20} {
			var err error
			ends, err = SplitAggregate(ends, flows, budget)
			require.NoError(t, err)
			require.NotEmpty(t, ends)
			require.Equal(t, len(flows), ends[len(ends)-1])
			start := 0
			var joined []flowstate.Flow
			for k, end := range ends {
				require.Greater(t, end, start-1)
				chunk := flows[start:end]
				body := AppendAggregate(nil, chunk)
				require.LessOrEqual(t, len(body), budget, "chunk %d of %d", k+1, len(ends))
				require.Equal(t, len(body), AggregateLen(chunk))
				if end < len(flows) {
					// Greedy: the next flow would not have fitted.
					assert.Greater(t, AggregateLen(flows[start:end+1]), budget)
				}
				v, err := DecodeAggregate(body)
				require.NoError(t, err)
				joined = append(joined, v.Flows()...)
				start = end
			}
			assert.Equal(t, flowstate.ValueOf(flows).Flows(), joined)
			if AggregateLen(flows) <= budget {
				assert.Len(t, ends, 1, "a state that fits is one chunk")
			}
		}
	}
}

func TestSplitAggregateRefusesABudgetBelowOneFlow(t *testing.T) {
	_, err := SplitAggregate(nil, fullFlows(3), 50)
	assert.ErrorIs(t, err, ErrChunkBudget)
	_, err = SplitAggregate(nil, nil, 10)
	assert.ErrorIs(t, err, ErrChunkBudget)
	ends, err := SplitAggregate(nil, nil, aggregateFixedLen+3)
	require.NoError(t, err)
	assert.Equal(t, []int{0}, ends)
}
