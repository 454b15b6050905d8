package state_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

type (
	sizes = map[flowstate.FlowID]uint64 // a state_size map
	times = map[flowstate.FlowID]int64  // a last_exec_time_map or start_time_map
)

// newManager returns an empty Manager.
func newManager(tb testing.TB, opts state.Options) *state.Manager {
	tb.Helper()
	return state.NewManager(opts)
}

// merge applies a report (GreptimeDB's merge) and fails the test on error.
func merge(tb testing.TB, m *state.Manager, nodeID uint64, v flowstate.FlowStateValue) state.MergeResult {
	tb.Helper()
	res, err := m.Merge(tb.Context(), state.Report{Node: nodeID, Flows: v.Flows()})
	require.NoError(tb, err, "merge report of node %d", nodeID)
	return res
}

// get returns the aggregate and its version (GreptimeDB's get: revision 0 is
// its None, with an empty value) and fails the test on error.
func get(tb testing.TB, m *state.Manager) (flowstate.FlowStateValue, flowstate.Version) {
	tb.Helper()
	s, err := m.Snapshot(tb.Context(), nil)
	require.NoError(tb, err)
	return s.Value(), s.Version
}

// execState is GreptimeDB's test helper: a value with only last_exec_time_map.
func execState(lastExecTimeMap map[flowstate.FlowID]int64) flowstate.FlowStateValue {
	return flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{},
		LastExecTimeMap: lastExecTimeMap,
		StartTimeMap:    map[flowstate.FlowID]int64{},
	}
}

// value builds a FlowStateValue; nil maps become empty ones so that values
// compare equal to what DecodeValue and Get return.
func value(sizes map[flowstate.FlowID]uint64, lastExec, start map[flowstate.FlowID]int64) flowstate.FlowStateValue {
	if sizes == nil {
		sizes = map[flowstate.FlowID]uint64{}
	}
	if lastExec == nil {
		lastExec = map[flowstate.FlowID]int64{}
	}
	if start == nil {
		start = map[flowstate.FlowID]int64{}
	}
	return flowstate.FlowStateValue{StateSize: sizes, LastExecTimeMap: lastExec, StartTimeMap: start}
}

// storedValue decodes the value that GreptimeDB's store would hold under key,
// which must exist.
func storedValue(tb testing.TB, m *state.Manager, key string) flowstate.FlowStateValue {
	tb.Helper()
	raw, ok := m.Dump()[key]
	require.True(tb, ok, "key %q is not stored", key)
	v, err := flowstate.DecodeValue(raw)
	require.NoError(tb, err, "decode the value of %q: %s", key, raw)
	return v
}

// storedKeys returns the keys of GreptimeDB's store.
func storedKeys(m *state.Manager) []string {
	var keys []string
	for k := range m.Dump() {
		keys = append(keys, k)
	}
	return keys
}

// encode is the stored form of v.
func encode(v flowstate.FlowStateValue) []byte { return flowstate.AppendJSON(nil, v.Flows()) }

// isEmpty reports whether v holds no flow.
func isEmpty(v flowstate.FlowStateValue) bool {
	return len(v.StateSize) == 0 && len(v.LastExecTimeMap) == 0 && len(v.StartTimeMap) == 0
}
