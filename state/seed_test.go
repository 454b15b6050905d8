package state_test

// The tests of GreptimeDB's FlowStateManager (flow_state.rs), one for one,
// with the same names and assertions. GreptimeDB's get() returning Some is a revision
// above 0 here; None is revision 0 with an empty value.

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

func TestDeserializeLegacyFlowStateValue(t *testing.T) {
	// Legacy format: only state_size and last_exec_time_map are present,
	// without the start_time_map field added later.
	legacyJSON := `{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000}}`
	v, err := flowstate.DecodeValue([]byte(legacyJSON))
	require.NoError(t, err)

	assert.Equal(t, map[flowstate.FlowID]uint64{1: 1024, 2: 2048}, v.StateSize)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 1700000000000}, v.LastExecTimeMap)
	// The missing field defaults to empty: old persisted data must not break.
	assert.Empty(t, v.StartTimeMap)
}

func TestFlowStateValueRoundtripIncludesStartTimeMap(t *testing.T) {
	v := flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{1: 1024},
		LastExecTimeMap: map[flowstate.FlowID]int64{1: 1700000000000},
		StartTimeMap:    map[flowstate.FlowID]int64{1: 1700000000000},
	}

	raw := encode(v)
	assert.Contains(t, string(raw), "start_time_map")

	decoded, err := flowstate.DecodeValue(raw)
	require.NoError(t, err)
	assert.Equal(t, v, decoded)
}

func TestMergeKeepsReportsFromDifferentNodes(t *testing.T) {
	m := newManager(t, state.Options{})

	// Node A reports flow 1 executed at t1.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))
	// Node B reports flow 2 executed at t2. Before the per-node merge this
	// would have wiped out node A's flow 1 entry.
	merge(t, m, 2, execState(map[flowstate.FlowID]int64{2: 200}))
	// Node A reports flow 1 executed at t3.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 300}))

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	// Flow 1 and flow 2 are both present, and flow 1 takes max(t1, t3).
	assert.Equal(t, map[flowstate.FlowID]int64{1: 300, 2: 200}, v.LastExecTimeMap)
}

func TestMergeReplacesSameNodeState(t *testing.T) {
	m := newManager(t, state.Options{})

	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))
	// A new report from the same node replaces the previous one. There is no
	// epoch comparison: arrival order alone decides, so this is also what a
	// restarted node hits.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{2: 200}))

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	assert.NotContains(t, v.LastExecTimeMap, flowstate.FlowID(1))
	assert.Equal(t, map[flowstate.FlowID]int64{2: 200}, v.LastExecTimeMap)
}

func TestMergeAcceptsClockRollbackFromSameNode(t *testing.T) {
	m := newManager(t, state.Options{})

	// A flownode restarts with its wall clock rolled back: it first reports
	// flow 1 at t1, then a smaller t0. Reports are applied in arrival order,
	// so the later report wins instead of being rejected for good.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 50}))

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 50}, v.LastExecTimeMap)
}

func TestMergeAggregatesStateSizeAndLastExecTimeByMax(t *testing.T) {
	m := newManager(t, state.Options{})

	// Both nodes report the same flow; the aggregate takes the max of
	// state_size and of last_exec_time_map across nodes.
	merge(t, m, 1, value(map[flowstate.FlowID]uint64{1: 1024}, map[flowstate.FlowID]int64{1: 100}, nil))
	merge(t, m, 2, value(map[flowstate.FlowID]uint64{1: 2048}, map[flowstate.FlowID]int64{1: 50}, nil))

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	assert.Equal(t, map[flowstate.FlowID]uint64{1: 2048}, v.StateSize)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 100}, v.LastExecTimeMap)
}

func TestMergeConcurrentReportsNoLostUpdate(t *testing.T) {
	m := newManager(t, state.Options{})

	// Two nodes report concurrently; the manager serialises the
	// read-modify-write so that neither report is lost.
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := m.Merge(t.Context(), state.Report{Node: 1, Flows: execState(map[flowstate.FlowID]int64{1: 100}).Flows()})
		assert.NoError(t, err)
	})
	wg.Go(func() {
		_, err := m.Merge(t.Context(), state.Report{Node: 2, Flows: execState(map[flowstate.FlowID]int64{2: 200}).Flows()})
		assert.NoError(t, err)
	})
	wg.Wait()

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 100, 2: 200}, v.LastExecTimeMap)
}

func TestMergeEmptyReportRemovesOwnFlowsKeepsOthers(t *testing.T) {
	m := newManager(t, state.Options{})

	// Node A reports flow 1, node B reports flow 2.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))
	merge(t, m, 2, execState(map[flowstate.FlowID]int64{2: 200}))

	// Node A reports an empty map: its own flow 1 leaves the aggregate while
	// node B's flow 2 stays.
	merge(t, m, 1, execState(map[flowstate.FlowID]int64{}))

	v, ver := get(t, m)
	require.NotZero(t, ver.Revision)
	assert.NotContains(t, v.LastExecTimeMap, flowstate.FlowID(1))
	assert.Equal(t, map[flowstate.FlowID]int64{2: 200}, v.LastExecTimeMap)
}

func TestMergeStateClearedOnInMemoryKvReset(t *testing.T) {
	m := newManager(t, state.Options{})

	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))
	_, ver := get(t, m)
	require.NotZero(t, ver.Revision, "get must be Some after a merge")

	// A metasrv leader change clears the in-memory KV, per-node keys
	// included since they live in the same KV.
	m.Clear()
	v, ver := get(t, m)
	assert.Zero(t, ver.Revision, "get must be None after the KV is cleared")
	assert.True(t, isEmpty(v), "the value at revision 0 must be empty, got %+v", v)

	// A fresh report works again after the reset, and node 1's flow 1 does
	// not come back.
	merge(t, m, 2, execState(map[flowstate.FlowID]int64{2: 200}))
	v, ver = get(t, m)
	require.NotZero(t, ver.Revision)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 200}, v.LastExecTimeMap)
	assert.NotContains(t, v.LastExecTimeMap, flowstate.FlowID(1))
}

func TestMergeWritesGlobalKey(t *testing.T) {
	m := newManager(t, state.Options{})

	merge(t, m, 1, execState(map[flowstate.FlowID]int64{1: 100}))

	// The global key is still __flow/state and holds the serialised
	// FlowStateValue, so existing get() and client readers are unchanged.
	dump := m.Dump()
	require.Contains(t, dump, "__flow/state")
	v, err := flowstate.DecodeValue(dump["__flow/state"])
	require.NoError(t, err)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 100}, v.LastExecTimeMap)
}
