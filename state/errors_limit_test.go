package state_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// errorsLimit: with --max-errors 3, one error from each of nodes 1 to 3
// fits; node 4's does not (507 naming --max-errors, nothing changed);
// node 1 may replace its error with another, and with none, which makes
// room for node 4's.
func errorsLimit(t *testing.T, m reportState) {
	for _, node := range []uint64{1, 2, 3} {
		_, err := m.Merge(t.Context(), withError(node, 5))
		require.NoError(t, err)
	}
	before, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	_, err = m.Merge(t.Context(), withError(4, 1))
	var ce *state.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.LimitMaxErrors, ce.Limit)
	assert.Equal(t, 4, ce.Would)
	assert.Contains(t, err.Error(), "past --max-errors 3")
	after, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, before.Version, after.Version, "nothing changed")
	_, err = m.Merge(t.Context(), withError(1, 9))
	require.NoError(t, err, "a node may replace its errors with as many")
	_, err = m.Merge(t.Context(), numbered(1, 0, 0, 1))
	require.NoError(t, err)
	_, err = m.Merge(t.Context(), withError(4, 1))
	require.NoError(t, err, "node 1's cleared error made room")
}

func TestErrorsAreLimited(t *testing.T) {
	lim := state.Limits{MaxErrors: 3}
	t.Run("manager", func(t *testing.T) { errorsLimit(t, state.NewManager(state.Options{Limits: lim})) })
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		errorsLimit(t, follow(t, open(), state.ReplicaOptions{Limits: lim}).mgr)
	})
}

// A window of reports, each within --max-error-bytes and --max-errors by
// what the watch applied, must not pass them together: the errors of
// writes in flight count, as their flows and new nodes do.
func TestReplicaPipelineCountsErrorsInFlight(t *testing.T) {
	for _, c := range []struct {
		limit string
		lim   state.Limits
	}{
		{state.LimitMaxErrorBytes, state.Limits{MaxErrorBytes: 100}},
		{state.LimitMaxErrors, state.Limits{MaxErrors: 1}},
	} {
		t.Run(c.limit, func(t *testing.T) {
			mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
			w := follow(t, mem, state.ReplicaOptions{Limits: c.lim})
			mem.StallWatches()
			first := submitReport(t, w.mgr, withError(1, 60))
			refused := submitReport(t, w.mgr, withError(2, 60))
			mem.ResumeWatches()
			_, err := outcome(t, first)
			require.NoError(t, err)
			_, err = outcome(t, refused)
			var ce *state.CapacityError
			require.ErrorAs(t, err, &ce, "the first report's error in flight and the second's pass the limit")
			assert.Equal(t, c.limit, ce.Limit)
			assert.Equal(t, 60, w.mgr.ErrorBytes(), "only the first report's error is held")
			assert.Equal(t, 1, w.mgr.Errors())
			_, err = outcome(t, submitReport(t, w.mgr, withError(2, 60)))
			require.ErrorIs(t, err, state.ErrCapacity, "the applied error makes the limit")
		})
	}
}
