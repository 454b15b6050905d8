package state

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// TestAggregateChangeMarksSurviveTheGenerationWrapping puts a flow's mark at
// the generation that follows the wrap, as if it had been recorded 2^32
// takes ago, and checks that its next change is still recorded.
func TestAggregateChangeMarksSurviveTheGenerationWrapping(t *testing.T) {
	a := NewAggregate()
	a.Apply(1, []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1}})
	_, ok := a.TakeChanges(nil, 10)
	require.True(t, ok)

	a.flows[1].mark = 1
	a.changes.gen = math.MaxUint32
	got, ok := a.TakeChanges(nil, 10)
	require.True(t, ok)
	assert.Empty(t, got)
	require.Equal(t, uint32(1), a.changes.gen, "the generation wrapped past 0")

	a.Apply(1, []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 2}})
	got, ok = a.TakeChanges(nil, 10)
	require.True(t, ok)
	assert.Equal(t, []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 2}}, got)
}
