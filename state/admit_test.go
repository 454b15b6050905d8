package state_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// refusalReason names why a report was refused, as a flownode tells it:
// the kind of error and, for a capacity error, its limit.
func refusalReason(err error) string {
	var ce *state.CapacityError
	switch {
	case err == nil:
		return "applied"
	case errors.Is(err, state.ErrUnsortedFlows):
		return "unsorted"
	case errors.Is(err, state.ErrStale):
		return "stale"
	case errors.As(err, &ce):
		return ce.Limit
	}
	return err.Error()
}

// TestBothModesRefuseAReportForTheSameReason: a report that breaks several
// rules at once is refused for the same one by a Manager and by a
// Replica, whose checks are one: the same reports get the same answers
// whichever mode the worker runs in.
func TestBothModesRefuseAReportForTheSameReason(t *testing.T) {
	lim := state.Limits{MaxNodes: 3, MaxFlows: 4, MaxErrorBytes: 100}
	// Before each case: node 1 holds two flows and 60 bytes of errors, in
	// its report seq 5 of process 100.
	held := withError(1, 60)
	held.Flows = append(held.Flows, flowstate.Flow{ID: 9, Has: flowstate.HasStateSize, StateSize: 1})
	held.NodeEpoch, held.HasNodeEpoch, held.Health.Seq, held.Health.HasSeq = 100, true, 5, true

	// wide is a report of node with flows 10..10+n-1 and an error of
	// errBytes bytes on its first flow.
	wide := func(node uint64, n, errBytes int) state.Report {
		rep := withError(node, errBytes)
		rep.Flows = nil
		for i := range n {
			rep.Flows = append(rep.Flows, flowstate.Flow{ID: flowstate.FlowID(10 + i), Has: flowstate.HasStateSize, StateSize: 1})
		}
		rep.Health.Flows[0].ID = 10
		return rep
	}
	stale := wide(1, 5, 50)
	stale.NodeEpoch, stale.HasNodeEpoch, stale.Health.Seq, stale.Health.HasSeq = 100, true, 4, true
	unsorted := stale
	unsorted.Flows = []flowstate.Flow{stale.Flows[1], stale.Flows[0]}

	cases := []struct {
		name string
		rep  state.Report
		want string
	}{
		{"unsorted, stale and past the limits", unsorted, "unsorted"},
		{"stale and past the limits", stale, "stale"},
		{"past the flows and the error bytes", wide(2, 3, 50), state.LimitMaxTotalFlows},
		{"past the error bytes only", wide(2, 1, 50), state.LimitMaxErrorBytes},
		{"within every limit", wide(2, 1, 30), "applied"},
	}
	modes := map[string]func(t *testing.T) reportState{
		"manager": func(*testing.T) reportState { return state.NewManager(state.Options{Limits: lim}) },
		"replica": func(t *testing.T) reportState {
			return follow(t, kv.NewSharedMemory(kv.SharedMemoryOptions{}), state.ReplicaOptions{Limits: lim}).mgr
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]string{}
			for mode, newState := range modes {
				m := newState(t)
				_, err := m.Merge(t.Context(), held)
				require.NoError(t, err, mode)
				before, err := m.Snapshot(t.Context(), nil)
				require.NoError(t, err)
				_, err = m.Merge(t.Context(), c.rep)
				got[mode] = refusalReason(err)
				if err != nil {
					after, err := m.Snapshot(t.Context(), nil)
					require.NoError(t, err)
					assert.Equal(t, before.Version, after.Version, "%s: a refused report changes nothing", mode)
				}
			}
			assert.Equal(t, map[string]string{"manager": c.want, "replica": c.want}, got)
		})
	}
}
