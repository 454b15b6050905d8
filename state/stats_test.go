package state_test

import (
	"strconv"
	"testing"
	"time"

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

// TestManagerCountsErrorBytesAcrossReportsAndEvictions: the error bytes a
// Manager holds follow each node's latest report, a report without health
// and an eviction included, and a report past MaxErrorBytes is judged by
// what the node's last report held, not by its first.
func TestManagerCountsErrorBytesAcrossReportsAndEvictions(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := newManager(t, state.Options{Now: c.now, Limits: state.Limits{MaxErrorBytes: 100}})
	msg := func(round int) int { return len("failed in round " + strconv.Itoa(round)) }
	mergeReport := func(rep state.Report) error {
		_, err := m.Merge(t.Context(), rep)
		return err
	}

	require.NoError(t, mergeReport(errorsReport(1, 3, 1)))
	c.t = c.t.Add(time.Minute)
	require.NoError(t, mergeReport(errorsReport(2, 2, 10)))
	assert.Equal(t, 3*msg(1)+2*msg(10), m.ErrorBytes())

	require.NoError(t, mergeReport(errorsReport(1, 1, 100)))
	assert.Equal(t, msg(100)+2*msg(10), m.ErrorBytes(), "node 1's new report replaces its three errors")

	// 1 + 2 errors of node 1 would hold 55 + 36 > 100 bytes only if node
	// 1's first report (51 bytes) still counted.
	require.NoError(t, mergeReport(errorsReport(1, 3, 2)))
	assert.Equal(t, 3*msg(2)+2*msg(10), m.ErrorBytes())
	var limit *state.CapacityError
	require.ErrorAs(t, mergeReport(errorsReport(1, 4, 3)), &limit, "4 errors of node 1 and node 2's 2 are past 100 bytes")
	assert.Equal(t, 3*msg(2)+2*msg(10), m.ErrorBytes(), "a refused report changes nothing")

	c.t = c.t.Add(time.Minute)
	require.NoError(t, mergeReport(state.Report{Node: 2, Flows: lastExecOf(2, 1).Flows()}))
	assert.Equal(t, 3*msg(2), m.ErrorBytes(), "a report without health holds no error")

	evicted, _, err := m.EvictSilent(t.Context(), c.t.Add(-30*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []uint64{1}, evicted, "node 2 reported last")
	assert.Equal(t, 0, m.ErrorBytes(), "node 1's errors left with it")
}
