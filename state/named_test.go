package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// A flow named in any map of a report counts toward --max-flows and
// --max-total-flows (PROTOCOL.md v3, "Report fields"), a flow that a node
// names only in processed_rows or last_errors included.

// healthReport is a report of node whose seed maps name seed (a last
// execution time each) and whose v3 maps name rows (processed_rows) and
// errs (last_errors, each with one error).
func healthReport(node uint64, seed, rows, errs []flowstate.FlowID) state.Report {
	rep := state.Report{Node: node, Flows: lastExecOf(node, seed...).Flows()}
	h := &flowstate.Health{HasProcessedRows: true, HasLastErrors: true}
	byID := map[flowstate.FlowID]*flowstate.FlowHealth{}
	var ids []flowstate.FlowID
	for _, id := range rows {
		byID[id] = &flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows, ProcessedRows: 10}
		ids = append(ids, id)
	}
	for _, id := range errs {
		one := []flowstate.FlowError{{Time: 1, Message: "e"}}
		if f := byID[id]; f != nil {
			f.Has |= flowstate.HasLastErrors
			f.LastErrors = one
			continue
		}
		byID[id] = &flowstate.FlowHealth{ID: id, Has: flowstate.HasLastErrors, LastErrors: one}
		ids = append(ids, id)
	}
	for id := range flowstate.FlowID(64) { // ids are small in these tests
		if f := byID[id]; f != nil {
			h.Flows = append(h.Flows, *f)
		}
	}
	rep.Health = h
	return rep
}

func ids(v ...flowstate.FlowID) []flowstate.FlowID { return v }

// healthOnlyFlowsCountTowardMaxTotalFlows: with --max-total-flows 4, node
// 1 names flow 1 in a seed map and node 2 flows 2 and 3 in processed_rows
// and 4 in last_errors: four flows, and a fifth, named only in
// processed_rows, is refused (507, nothing changed). A flow that another
// node names already adds nothing, in whichever map; a node that stops
// naming flows makes room, for flows of either kind.
func healthOnlyFlowsCountTowardMaxTotalFlows(t *testing.T, m reportState) {
	merge := func(rep state.Report) {
		t.Helper()
		_, err := m.Merge(t.Context(), rep)
		require.NoError(t, err, "report of node %d", rep.Node)
	}
	refused := func(rep state.Report, would int) {
		t.Helper()
		before, err := m.Snapshot(t.Context(), nil)
		require.NoError(t, err)
		_, err = m.Merge(t.Context(), rep)
		var ce *state.CapacityError
		require.ErrorAs(t, err, &ce, "report of node %d", rep.Node)
		assert.Equal(t, state.LimitMaxTotalFlows, ce.Limit)
		assert.Equal(t, would, ce.Would)
		after, err := m.Snapshot(t.Context(), nil)
		require.NoError(t, err)
		assert.Equal(t, before.Version, after.Version, "nothing changed")
	}
	merge(healthReport(1, ids(1), nil, nil))
	merge(healthReport(2, nil, ids(2, 3), ids(4)))
	refused(healthReport(3, nil, ids(5), nil), 5)
	refused(healthReport(3, nil, nil, ids(5)), 5)
	refused(healthReport(3, ids(5), nil, nil), 5)
	merge(healthReport(3, nil, ids(1, 2), ids(3, 4))) // named already, by seed or health
	merge(healthReport(2, nil, ids(2), nil))          // 3 and 4 stay named by node 3
	refused(healthReport(4, nil, ids(5), nil), 5)
	merge(healthReport(3, nil, nil, nil)) // 3 and 4 named by nobody now: 2 flows
	merge(healthReport(4, ids(5), ids(6), nil))
	refused(healthReport(5, nil, ids(7), nil), 5)
}

func TestHealthOnlyFlowsCountTowardMaxTotalFlows(t *testing.T) {
	lim := state.Limits{MaxFlows: 4}
	t.Run("manager", func(t *testing.T) {
		healthOnlyFlowsCountTowardMaxTotalFlows(t, state.NewManager(state.Options{Limits: lim}))
	})
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		w := follow(t, open(), state.ReplicaOptions{Limits: lim})
		healthOnlyFlowsCountTowardMaxTotalFlows(t, w.mgr)
		// A worker that loads the store (a restart) counts the flows of the
		// stored values' v3 maps alike: four named, a fifth refused.
		loaded := follow(t, open(), state.ReplicaOptions{Limits: lim})
		_, err := loaded.mgr.Merge(t.Context(), healthReport(5, nil, ids(7), nil))
		require.ErrorIs(t, err, state.ErrCapacity)
	})
}

// TestManagerForgetsTheHealthFlowsOfAnEvictedNode: an evicted node's
// health-only flows stop counting toward --max-total-flows.
func TestManagerForgetsTheHealthFlowsOfAnEvictedNode(t *testing.T) {
	m := state.NewManager(state.Options{Limits: state.Limits{MaxFlows: 2}})
	_, err := m.Merge(t.Context(), healthReport(1, nil, ids(1, 2), nil))
	require.NoError(t, err)
	_, err = m.Merge(t.Context(), healthReport(2, nil, ids(3), nil))
	require.ErrorIs(t, err, state.ErrCapacity)
	evicted, _, err := m.EvictSilent(t.Context(), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, evicted)
	_, err = m.Merge(t.Context(), healthReport(2, nil, ids(3, 4), nil))
	assert.NoError(t, err)
}

// TestReplicaCountsHealthFlowsAgainstMaxFlows: --max-flows counts the
// distinct flows of all a report's maps, before its write; a stored
// value that names more is applied (the limit is the writer's).
func TestReplicaCountsHealthFlowsAgainstMaxFlows(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{MaxReportFlows: 3})
	_, err := w.mgr.Merge(t.Context(), healthReport(1, ids(1, 2), ids(2, 3), ids(4)))
	require.ErrorIs(t, err, state.ErrTooManyFlows)
	_, err = mem.Get(t.Context(), flowstate.NodeKey(1))
	assert.ErrorIs(t, err, kv.ErrNotFound, "nothing written")
	_, err = w.mgr.Merge(t.Context(), healthReport(1, ids(1, 2), ids(2, 3), ids(1)))
	require.NoError(t, err, "three distinct flows")

	_, err = mem.Put(t.Context(), flowstate.NodeKey(2),
		[]byte(`{"state_size":{"1":1},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"2":5,"3":6},"last_errors":{"4":[]}}`))
	require.NoError(t, err)
	w.synced(t)
	assert.Empty(t, w.mgr.StoreRefusals())
	nodes, _, err := w.mgr.Nodes(t.Context())
	require.NoError(t, err)
	require.Len(t, nodes, 2, "node 2's value names 4 flows: applied")
}

// A window of reports, each within --max-total-flows by what the watch
// applied, must not pass it together: the health-only flows of writes in
// flight count too.
func TestReplicaPipelineCountsHealthFlowsInFlight(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: state.Limits{MaxFlows: 4}})
	mem.StallWatches()
	first := submitReport(t, w.mgr, healthReport(1, ids(1), ids(2, 3), nil))
	refused := submitReport(t, w.mgr, healthReport(2, nil, ids(4, 5), nil))
	mem.ResumeWatches()
	_, err := outcome(t, first)
	require.NoError(t, err)
	_, err = outcome(t, refused)
	require.ErrorIs(t, err, state.ErrCapacity, "three flows in flight and two more pass 4")
}
