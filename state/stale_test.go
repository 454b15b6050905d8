package state_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// reportState is a state a report is merged into, in either mode.
type reportState interface {
	Merge(ctx context.Context, rep state.Report) (state.MergeResult, error)
	Snapshot(ctx context.Context, dst []flowstate.Flow) (state.Snapshot, error)
}

// numbered is a report of node with one flow whose last execution time is
// at, from process epoch (0: none) numbered seq (0: none).
func numbered(node, epoch, seq uint64, at int64) state.Report {
	rep := state.Report{Node: node, NodeEpoch: epoch, HasNodeEpoch: epoch != 0,
		Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasLastExecTime, LastExecTime: at}}}
	if seq != 0 {
		rep.Health = &flowstate.Health{Seq: seq, HasSeq: true}
	}
	return rep
}

// staleRule runs every sentence of the stale rule (PROTOCOL.md, "Stale
// reports") against a fresh state of node 7 that newState makes.
func staleRule(t *testing.T, newState func(t *testing.T) reportState) {
	apply := func(t *testing.T, m reportState, rep state.Report) state.MergeResult {
		t.Helper()
		res, err := m.Merge(t.Context(), rep)
		require.NoError(t, err, "report node_epoch %d %+v is applied", rep.NodeEpoch, rep.Health)
		return res
	}
	refused := func(t *testing.T, m reportState, rep state.Report, why string) {
		t.Helper()
		before, err := m.Snapshot(t.Context(), nil)
		require.NoError(t, err)
		_, err = m.Merge(t.Context(), rep)
		var se *state.StaleError
		require.ErrorAs(t, err, &se, why)
		assert.ErrorIs(t, err, state.ErrStale)
		assert.Equal(t, [2]uint64{rep.NodeEpoch, rep.Health.Seq}, [2]uint64{se.Epoch, se.Seq})
		assert.Contains(t, err.Error(), "node_epoch", "the reason names both reports")
		after, err := m.Snapshot(t.Context(), nil)
		require.NoError(t, err)
		assert.Equal(t, before.Version, after.Version, "a stale report changes nothing, the revision included")
		assert.Equal(t, before.Value(), after.Value())
	}

	t.Run("same process, seq not greater", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 78, 78))
		refused(t, m, numbered(7, 100, 76, 76), "an older seq of the same process")
		refused(t, m, numbered(7, 100, 78, 1), "the same seq again (a retry that was applied)")
		apply(t, m, numbered(7, 100, 79, 79))
	})
	t.Run("a new process's first report whatever its seq", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 500, 1))
		apply(t, m, numbered(7, 200, 1, 2))
	})
	t.Run("a retired process", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 5, 1))
		apply(t, m, numbered(7, 200, 1, 2)) // retires 100
		refused(t, m, numbered(7, 100, 6, 3), "a later seq of a process the node moved away from")
		apply(t, m, numbered(7, 0, 3, 4)) // numbered, without node_epoch: retires 200
		refused(t, m, numbered(7, 200, 2, 5), "a report without node_epoch retires the one before")
	})
	t.Run("without seq or node_epoch, as in v2", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 9, 1))
		apply(t, m, numbered(7, 100, 0, 2)) // no seq: applied as in v2
		apply(t, m, numbered(7, 100, 1, 3)) // the held report has no seq to compare with
		apply(t, m, numbered(7, 0, 5, 4))   // seq without node_epoch: not judged
		apply(t, m, numbered(7, 0, 1, 5))
	})
	t.Run("a report without v3 fields keeps the node's retired epochs", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 9, 1))
		apply(t, m, numbered(7, 200, 1, 2)) // retires 100
		apply(t, m, numbered(7, 200, 0, 3)) // no v3 field: stored with node_epoch 200 and 100 retired
		refused(t, m, numbered(7, 100, 10, 4), "100 stays retired")
		apply(t, m, numbered(7, 200, 1, 5)) // the held report of 200 has no seq
	})
	t.Run("an unnumbered report retires the held node_epoch", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 5, 1))
		apply(t, m, numbered(7, 0, 0, 2)) // a v2 flownode, `worker send` without --seq
		refused(t, m, numbered(7, 100, 6, 3), "a late report of the earlier process")
		apply(t, m, numbered(7, 300, 0, 4)) // another process, unnumbered: 100 stays retired
		refused(t, m, numbered(7, 100, 7, 5), "still retired after two unnumbered reports")
		apply(t, m, numbered(7, 400, 1, 6)) // retires 300
		refused(t, m, numbered(7, 300, 1, 7), "300 retired by a numbered report after it")
	})
	t.Run("a report without v3 fields and nothing to retire is the seed's value", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 0, 1)) // no seq: nothing held of process 100
		apply(t, m, numbered(7, 200, 0, 2)) // nothing to retire: stored byte for byte
		apply(t, m, numbered(7, 100, 1, 3)) // nothing held to compare with
	})
	t.Run("the last 8 retired", func(t *testing.T) {
		m := newState(t)
		for e := uint64(1); e <= flowstate.MaxRetiredEpochs+2; e++ {
			apply(t, m, numbered(7, e, 1, int64(e)))
		}
		// Retired now: 2..9 (1 fell out); 10 is held.
		apply(t, m, numbered(7, 1, 2, 20)) // forgotten: a new process to the state
		refused(t, m, numbered(7, 3, 2, 21), "3 is among the last 8 retired")
	})
	t.Run("another node is not affected", func(t *testing.T) {
		m := newState(t)
		apply(t, m, numbered(7, 100, 9, 1))
		apply(t, m, numbered(8, 100, 1, 2))
	})
}

func TestStaleReportsOnAManager(t *testing.T) {
	staleRule(t, func(*testing.T) reportState { return state.NewManager(state.Options{}) })
}

// TestAStaleReportIsRefusedBeforeTheCapacityLimits: a report that is both
// stale and past a limit is answered as stale (409 before 507).
func TestAStaleReportIsRefusedBeforeTheCapacityLimits(t *testing.T) {
	m := state.NewManager(state.Options{Limits: state.Limits{MaxFlows: 1}})
	_, err := m.Merge(t.Context(), numbered(7, 100, 5, 1))
	require.NoError(t, err)
	rep := numbered(7, 100, 4, 2)
	rep.Flows = append(rep.Flows, flowstate.Flow{ID: 2, Has: flowstate.HasStateSize, StateSize: 1})
	_, err = m.Merge(t.Context(), rep)
	require.ErrorIs(t, err, state.ErrStale)
	assert.False(t, errors.Is(err, state.ErrCapacity))
}

// TestAnUnnumberedReportKeepsTheRetiredEpochsAcrossRestarts: after an
// unnumbered report, a worker that did not take it and a worker started
// after it refuse a late report of the process it replaced, as the one
// that took it does.
func TestAnUnnumberedReportKeepsTheRetiredEpochsAcrossRestarts(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{ID: "a"})
		b := follow(t, open(), state.ReplicaOptions{ID: "b"})
		_, err := a.mgr.Merge(t.Context(), numbered(7, 100, 5, 5))
		require.NoError(t, err)
		_, err = a.mgr.Merge(t.Context(), numbered(7, 0, 0, 6))
		require.NoError(t, err)
		require.NoError(t, b.mgr.Sync(t.Context()))
		_, err = b.mgr.Merge(t.Context(), numbered(7, 100, 6, 7))
		require.ErrorIs(t, err, state.ErrStale, "the other worker judges by the stored value")
		a.stop(t)
		b.stop(t)
		c := follow(t, open(), state.ReplicaOptions{ID: "c"})
		_, err = c.mgr.Merge(t.Context(), numbered(7, 100, 6, 7))
		require.ErrorIs(t, err, state.ErrStale, "a worker started later judges by the stored value")
		got, _ := fget(t, c.mgr)
		assert.Equal(t, map[flowstate.FlowID]int64{1: 6}, got.LastExecTimeMap)
	})
}

func TestStaleReportsOnAReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		staleRule(t, func(t *testing.T) reportState {
			wipe(t, open()) // a fresh state of node 7 in each case
			return follow(t, open(), state.ReplicaOptions{}).mgr
		})
	})
}

// TestAStaleReportIsStaleWhicheverWorkerItReachesAndAfterARestart: the
// rule holds against the node's stored report, so a worker that did not
// take the later report, and a worker started after it, refuse the
// earlier one alike.
func TestAStaleReportIsStaleWhicheverWorkerItReachesAndAfterARestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{ID: "a"})
		b := follow(t, open(), state.ReplicaOptions{ID: "b"})
		res, err := a.mgr.Merge(t.Context(), numbered(7, 100, 78, 78))
		require.NoError(t, err)
		require.NoError(t, b.mgr.Sync(t.Context()))
		_, err = b.mgr.Merge(t.Context(), numbered(7, 100, 76, 76))
		require.ErrorIs(t, err, state.ErrStale, "the other worker judges by the stored report")
		c := follow(t, open(), state.ReplicaOptions{ID: "c"})
		_, err = c.mgr.Merge(t.Context(), numbered(7, 100, 77, 77))
		require.ErrorIs(t, err, state.ErrStale, "a worker started later judges by the stored report")
		got, v := fget(t, c.mgr)
		assert.Equal(t, res.Version, v, "nothing changed, the revision included")
		assert.Equal(t, map[flowstate.FlowID]int64{1: 78}, got.LastExecTimeMap)
	})
}

// withError is a report of node with one flow and one error of n bytes.
func withError(node uint64, n int) state.Report {
	return state.Report{Node: node, Flows: []flowstate.Flow{{ID: flowstate.FlowID(node), Has: flowstate.HasStateSize, StateSize: 1}},
		Health: &flowstate.Health{HasLastErrors: true, Flows: []flowstate.FlowHealth{{ID: flowstate.FlowID(node), Has: flowstate.HasLastErrors,
			LastErrors: []flowstate.FlowError{{Time: 1, Message: strings.Repeat("e", n)}}}}}}
}

// errorBytesLimit: with --max-error-bytes 100, 60 bytes of errors from
// node 1 and 40 from node 2 fit; node 1 replaces its own with 10, which
// makes room for 50 from node 3; 41 from node 2 then does not fit (507,
// nothing changed).
func errorBytesLimit(t *testing.T, m reportState) {
	for _, rep := range []state.Report{withError(1, 60), withError(2, 40), withError(1, 10), withError(3, 50)} {
		_, err := m.Merge(t.Context(), rep)
		require.NoError(t, err)
	}
	before, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	_, err = m.Merge(t.Context(), withError(2, 41))
	var ce *state.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.LimitMaxErrorBytes, ce.Limit)
	assert.Contains(t, err.Error(), "past --max-error-bytes 100")
	after, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, before.Version, after.Version, "nothing changed")
}

func TestErrorBytesAreLimited(t *testing.T) {
	lim := state.Limits{MaxErrorBytes: 100}
	t.Run("manager", func(t *testing.T) { errorBytesLimit(t, state.NewManager(state.Options{Limits: lim})) })
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		errorBytesLimit(t, follow(t, open(), state.ReplicaOptions{Limits: lim}).mgr)
	})
}
