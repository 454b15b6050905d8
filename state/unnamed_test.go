package state_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// emptyErrorsOf is a report of node that names flows only by empty error
// arrays.
func emptyErrorsOf(node uint64, ids ...flowstate.FlowID) state.Report {
	h := &flowstate.Health{HasLastErrors: true}
	for _, id := range ids {
		h.Flows = append(h.Flows, flowstate.FlowHealth{ID: id, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}})
	}
	return state.Report{Node: node, Health: h}
}

// unnamedFlowsCountForNothing: with --max-total-flows 2 and --max-flows 2,
// a flow named only by an empty error array is named nowhere: a report of
// 1,000 of them is taken, and counts toward neither limit.
func unnamedFlowsCountForNothing(t *testing.T, m reportState) {
	_, err := m.Merge(t.Context(), healthReport(1, ids(1), nil, ids(2)))
	require.NoError(t, err)
	many := make([]flowstate.FlowID, 1000)
	for i := range many {
		many[i] = flowstate.FlowID(100 + i)
	}
	_, err = m.Merge(t.Context(), emptyErrorsOf(2, many...))
	require.NoError(t, err, "empty error arrays name no flow")
	_, err = m.Merge(t.Context(), healthReport(3, ids(5), nil, nil))
	require.ErrorIs(t, err, state.ErrCapacity, "two flows named already")
	_, err = m.Merge(t.Context(), healthReport(3, ids(1), nil, nil))
	require.NoError(t, err, "a flow named already adds nothing")
}

func TestAFlowNamedOnlyByAnEmptyErrorArrayCountsForNothing(t *testing.T) {
	lim := state.Limits{MaxFlows: 2}
	m := state.NewManager(state.Options{Limits: lim})
	unnamedFlowsCountForNothing(t, m)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: lim, MaxReportFlows: 2})
	unnamedFlowsCountForNothing(t, w.mgr)
	stats, err := w.mgr.Stats(t.Context())
	require.NoError(t, err)
	for _, f := range stats.Health {
		assert.Less(t, f.ID, flowstate.FlowID(100), "flow %d is held nowhere", f.ID)
	}
}
