package state_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

type (
	sizes = map[flowstate.FlowID]uint64 // a state_size map
	times = map[flowstate.FlowID]int64  // a last_exec_time_map or start_time_map
)

// newManager returns a Manager over a fresh in-memory store, and the store.
func newManager(tb testing.TB, opts state.Options) (*state.Manager, *kv.Memory) {
	tb.Helper()
	store := kv.NewMemory()
	return state.NewManager(store, opts), store
}

// merge applies a report and fails the test on error.
func merge(tb testing.TB, m *state.Manager, nodeID uint64, v flowstate.FlowStateValue) state.MergeResult {
	tb.Helper()
	res, err := m.Merge(tb.Context(), nodeID, v)
	require.NoError(tb, err, "merge report of node %d", nodeID)
	return res
}

// get returns the aggregate and its version and fails the test on error.
func get(tb testing.TB, m *state.Manager) (flowstate.FlowStateValue, flowstate.Version) {
	tb.Helper()
	v, ver, err := m.Get(tb.Context())
	require.NoError(tb, err)
	return v, ver
}

// flush writes the aggregate key and fails the test on error.
func flush(tb testing.TB, m *state.Manager) {
	tb.Helper()
	require.NoError(tb, m.Flush(tb.Context()))
}

// execState is the seed's test helper: a value with only last_exec_time_map.
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

// storedValue decodes the value stored under key, which must exist.
func storedValue(tb testing.TB, store *kv.Memory, key string) flowstate.FlowStateValue {
	tb.Helper()
	raw, ok := store.Dump()[key]
	require.True(tb, ok, "key %q is not stored", key)
	v, err := flowstate.DecodeValue(raw)
	require.NoError(tb, err, "decode the value of %q: %s", key, raw)
	return v
}

// storedKeys returns the keys of the store's dump.
func storedKeys(store *kv.Memory) []string {
	var keys []string
	for k := range store.Dump() {
		keys = append(keys, k)
	}
	return keys
}
