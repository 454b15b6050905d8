package state_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// errorsReport is a report of node with flows 1..n, each with rows
// processed and one error whose message names round.
func errorsReport(node uint64, n int, round int) state.Report {
	h := &flowstate.Health{HasProcessedRows: true, HasLastErrors: true}
	for id := range flowstate.FlowID(n) {
		h.Flows = append(h.Flows, flowstate.FlowHealth{
			ID: id + 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: uint64(round),
			LastErrors: []flowstate.FlowError{{Time: int64(round), Message: "failed in round " + strconv.Itoa(round)}},
		})
	}
	return state.Report{Node: node, Flows: lastExecOf(node, 1).Flows(), Health: h}
}

// TestManagerStatsKeepTheirHealthWhileReportsArrive: the stats view
// taken before a node's next reports still shows the health it was taken
// at, though the node's later reports are kept in the buffers that held it.
func TestManagerStatsKeepTheirHealthWhileReportsArrive(t *testing.T) {
	m := newManager(t, state.Options{})
	_, err := m.Merge(t.Context(), errorsReport(1, 3, 1))
	require.NoError(t, err)
	before, err := m.Stats(t.Context())
	require.NoError(t, err)
	want := errorsReport(1, 3, 1).Health

	for round := 2; round <= 4; round++ {
		_, err := m.Merge(t.Context(), errorsReport(1, 3, round))
		require.NoError(t, err)
	}
	require.Len(t, before.Nodes, 1)
	assert.Equal(t, want.Flows, before.Nodes[0].Health.Flows, "the health of round 1")
	require.Len(t, before.Health, 3)
	assert.Equal(t, "failed in round 1", before.Health[0].LastErrors[0].Message)

	after, err := m.Stats(t.Context())
	require.NoError(t, err)
	assert.Equal(t, errorsReport(1, 3, 4).Health.Flows, after.Nodes[0].Health.Flows, "the health of round 4")
}

// TestManagerRefusedReportLeavesTheNodesHealth: reports refused for
// --max-error-bytes, whichever of the node's two buffers is the spare,
// leave the node's health as its last report set it.
func TestManagerRefusedReportLeavesTheNodesHealth(t *testing.T) {
	m := newManager(t, state.Options{Limits: state.Limits{MaxErrorBytes: 100}})
	_, err := m.Merge(t.Context(), errorsReport(1, 1, 1))
	require.NoError(t, err)
	for range 2 { // into either buffer
		_, err = m.Merge(t.Context(), errorsReport(1, 10, 2))
		var capErr *state.CapacityError
		require.ErrorAs(t, err, &capErr, "ten errors of 17 bytes are past 100 bytes")
	}
	s, err := m.Stats(t.Context())
	require.NoError(t, err)
	require.Len(t, s.Nodes, 1)
	assert.Equal(t, errorsReport(1, 1, 1).Health.Flows, s.Nodes[0].Health.Flows)
}

// TestMergeWithHealthDoesNotAllocateInSteadyState: a node's reports of
// ten flows, each with rows and an error, are kept in the node's two
// buffers, which the next reports reuse.
func TestMergeWithHealthDoesNotAllocateInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m := newManager(t, state.Options{})
	reps := []state.Report{errorsReport(1, 10, 1), errorsReport(1, 10, 2)}
	for _, rep := range reps { // warm up: the node and both buffers exist
		_, err := m.Merge(t.Context(), rep)
		require.NoError(t, err)
	}
	var err error
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		_, err = m.Merge(t.Context(), reps[i%2])
		i++
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "allocations per Merge")
}
