package state_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// model is the aggregate computed the obvious way: every node's last report,
// aggregated from scratch.
type model map[uint64][]flowstate.Flow

func (m model) flows() []flowstate.Flow {
	agg := map[flowstate.FlowID]flowstate.Flow{}
	for _, report := range m {
		for _, f := range report {
			a, ok := agg[f.ID]
			if !ok {
				a = flowstate.Flow{ID: f.ID}
			}
			if f.Has&flowstate.HasStateSize != 0 && (a.Has&flowstate.HasStateSize == 0 || f.StateSize > a.StateSize) {
				a.StateSize = f.StateSize
			}
			if f.Has&flowstate.HasLastExecTime != 0 && (a.Has&flowstate.HasLastExecTime == 0 || f.LastExecTime > a.LastExecTime) {
				a.LastExecTime = f.LastExecTime
			}
			if f.Has&flowstate.HasStartTime != 0 && (a.Has&flowstate.HasStartTime == 0 || f.StartTime > a.StartTime) {
				a.StartTime = f.StartTime
			}
			a.Has |= f.Has
			if a.Has != 0 {
				agg[f.ID] = a
			}
		}
	}
	out := slices.Collect(maps.Values(agg))
	slices.SortFunc(out, func(a, b flowstate.Flow) int { return int(a.ID) - int(b.ID) })
	return out
}

// randomFlows returns a sorted report of up to n of flows 0..ids-1 with
// random fields (sometimes none) and values from small ranges, so that
// nodes tie.
func randomFlows(r *rand.Rand, n, ids int) []flowstate.Flow {
	var out []flowstate.Flow
	for id := range ids {
		if r.IntN(ids) >= n {
			continue
		}
		f := flowstate.Flow{ID: flowstate.FlowID(id), Has: flowstate.Fields(r.IntN(8))}
		f.StateSize = uint64(r.IntN(5))
		f.LastExecTime = int64(r.IntN(7) - 3)
		f.StartTime = int64(r.IntN(5) - 2)
		out = append(out, f)
	}
	return out
}

// changesOf returns what changed between two aggregates, as TakeChanges
// reports it.
func changesOf(before, after []flowstate.Flow) []flowstate.Flow {
	b := map[flowstate.FlowID]flowstate.Flow{}
	for _, f := range before {
		b[f.ID] = f
	}
	var out []flowstate.Flow
	for _, f := range after {
		if old, ok := b[f.ID]; !ok || old != f {
			out = append(out, f)
		}
		delete(b, f.ID)
	}
	for id := range b {
		out = append(out, flowstate.Flow{ID: id})
	}
	slices.SortFunc(out, func(a, b flowstate.Flow) int { return int(a.ID) - int(b.ID) })
	return out
}

func TestAggregateMatchesModel(t *testing.T) {
	// Few nodes (scans) and many nodes sharing few flows (heaps), with
	// evictions and empty reports.
	for _, size := range []struct{ nodes, ids int }{{4, 16}, {40, 6}, {200, 3}} {
		t.Run(fmt.Sprintf("nodes=%d/ids=%d", size.nodes, size.ids), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(size.nodes)))
			a := state.NewAggregate()
			want := model{}
			var last, took []flowstate.Flow
			for step := range 5000 {
				node := uint64(r.IntN(size.nodes))
				before := want.flows()
				var changed bool
				if r.IntN(20) == 0 {
					changed = a.Remove(node)
					delete(want, node)
				} else {
					report := randomFlows(r, r.IntN(size.ids+1), size.ids)
					changed = a.Apply(node, report)
					want[node] = slices.Clone(report)
					for i := range report {
						report[i].StateSize += 100 // Apply retains nothing
					}
				}
				after := want.flows()
				got := a.AppendFlows(nil)
				require.Equal(t, after, got, "step %d", step)
				require.Equal(t, !slices.Equal(before, after), changed, "step %d: changed", step)
				nodes, flows := a.Len()
				require.Equal(t, len(want), nodes)
				require.Len(t, got, flows)
				if step%7 == 0 {
					var ok bool
					took, ok = a.TakeChanges(took, 1<<20)
					require.True(t, ok)
					// Every change is reported, with the entry now; a flow whose
					// entry changed and changed back may be reported too.
					now := map[flowstate.FlowID]flowstate.Flow{}
					for _, f := range after {
						now[f.ID] = f
					}
					for _, f := range changesOf(last, after) {
						require.Contains(t, took, f, "step %d: changes", step)
					}
					for i, f := range took {
						want, ok := now[f.ID]
						if !ok {
							want = flowstate.Flow{ID: f.ID} // it left
						}
						require.Equal(t, want, f, "step %d", step)
						require.True(t, i == 0 || took[i-1].ID < f.ID, "step %d: sorted", step)
					}
					last = after
				}
			}
		})
	}
}

func TestAggregateEmptyReportKeepsTheNode(t *testing.T) {
	a := state.NewAggregate()
	assert.False(t, a.Apply(7, nil))
	assert.False(t, a.Apply(8, []flowstate.Flow{{ID: 1}}), "a flow with no field is left out")
	nodes, flows := a.Len()
	assert.Equal(t, 2, nodes)
	assert.Zero(t, flows)
	n, ok := a.NodeFlows(8)
	assert.True(t, ok)
	assert.Zero(t, n)
	assert.False(t, a.Remove(7))
	assert.False(t, a.Remove(7))
	nodes, _ = a.Len()
	assert.Equal(t, 1, nodes)
}

func TestAggregateCheckLimits(t *testing.T) {
	a := state.NewAggregate()
	f := func(ids ...flowstate.FlowID) []flowstate.Flow {
		var out []flowstate.Flow
		for _, id := range ids {
			out = append(out, flowstate.Flow{ID: id, Has: flowstate.HasStateSize})
		}
		return out
	}
	lim := state.Limits{MaxNodes: 2, MaxFlows: 3}
	require.NoError(t, a.Check(1, f(1, 2), lim))
	a.Apply(1, f(1, 2))
	require.NoError(t, a.Check(2, f(2, 3), lim))
	a.Apply(2, f(2, 3))

	var ce *state.CapacityError
	err := a.Check(3, nil, lim)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.CapacityError{Limit: state.LimitMaxNodes, Max: 2, Would: 3}, *ce)
	assert.ErrorIs(t, err, state.ErrCapacity)

	err = a.Check(2, f(2, 3, 4), lim)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.CapacityError{Limit: state.LimitMaxTotalFlows, Max: 3, Would: 4}, *ce)

	// Node 2 gives up flow 3 (its alone) for flow 4: still 3 flows.
	assert.NoError(t, a.Check(2, f(2, 4), lim))
	// Node 1 gives up flow 2 (shared with node 2) for flow 4: 4 flows.
	assert.Error(t, a.Check(1, f(1, 4), lim))
	// A flow with no field does not count.
	assert.NoError(t, a.Check(1, append(f(1, 2), flowstate.Flow{ID: 9}), lim))

	// Past a lowered limit, a known node's report that does not grow the
	// aggregate passes; one that grows it does not.
	low := state.Limits{MaxNodes: 1, MaxFlows: 1}
	assert.NoError(t, a.Check(2, f(2, 3), low))
	assert.NoError(t, a.Check(2, nil, low))
	assert.Error(t, a.Check(2, f(2, 3, 5), low))
	assert.NoError(t, a.Check(5, nil, state.Limits{}))
}

func TestAggregateTakeChangesOverLimit(t *testing.T) {
	a := state.NewAggregate()
	report := make([]flowstate.Flow, 10)
	for i := range report {
		report[i] = flowstate.Flow{ID: flowstate.FlowID(i), Has: flowstate.HasStateSize}
	}
	a.Apply(1, report)
	got, ok := a.TakeChanges(nil, 5)
	assert.False(t, ok, "10 changes past a max of 5")
	assert.Empty(t, got)

	report[3].StateSize = 1
	a.Apply(1, report)
	got, ok = a.TakeChanges(got, 5)
	require.True(t, ok)
	assert.Equal(t, []flowstate.Flow{report[3]}, got)

	got, ok = a.TakeChanges(got, 5)
	assert.True(t, ok)
	assert.Empty(t, got, "nothing changed since the last take")

	// Over the limit, the take says so and the record starts over.
	for i := range report {
		report[i].StateSize = 2
	}
	a.Apply(1, report)
	_, ok = a.TakeChanges(got, 9)
	assert.False(t, ok)
	a.Remove(1)
	got, ok = a.TakeChanges(got, 100)
	require.True(t, ok)
	assert.Len(t, got, 10)
	for _, f := range got {
		assert.Zero(t, f.Has, "flow %d left", f.ID)
	}

	a.Apply(2, report[:1])
	a.Reset()
	got, ok = a.TakeChanges(got, 100)
	assert.True(t, ok)
	assert.Empty(t, got, "Reset clears the record")
}

func TestAggregateApplyDoesNotAllocateInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := state.NewAggregate()
	const shared = 20 // past the scan, into the heaps
	reports := [2][]flowstate.Flow{}
	for p := range reports {
		for id := range 50 {
			reports[p] = append(reports[p], flowstate.Flow{ID: flowstate.FlowID(id), Has: flowstate.HasStateSize | flowstate.HasLastExecTime,
				StateSize: uint64(id + p), LastExecTime: int64(p)})
		}
	}
	for node := range uint64(shared) {
		a.Apply(node, reports[0])
		a.Apply(node, reports[1])
	}
	var changes []flowstate.Flow
	changes, _ = a.TakeChanges(changes, 1000)
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		a.Apply(uint64(i%shared), reports[i%2])
		if i%2 == 1 {
			a.Apply(uint64(i%shared), reports[0][:i%50]) // flows leave and come back
		}
		i++
		changes, _ = a.TakeChanges(changes, 1000)
	})
	assert.Zero(t, allocs, "allocations per Apply and TakeChanges")
}

func TestAggregateChangeRecordStaysBoundedUntaken(t *testing.T) {
	a := state.NewAggregate()
	// Flows come and go, and nobody takes the changes: the record stops
	// growing, and the first take says that it overflowed.
	for round := range 50 {
		report := make([]flowstate.Flow, 100)
		for i := range report {
			report[i] = flowstate.Flow{ID: flowstate.FlowID(round*100 + i), Has: flowstate.HasStartTime}
		}
		a.Apply(1, report)
	}
	got, ok := a.TakeChanges(nil, 1<<20)
	assert.False(t, ok, "5,000 changes, past the 1,024 recorded before any take")
	assert.Empty(t, got)
}

func TestAggregateTakeChangesCountsFlowsThatCameBackOnce(t *testing.T) {
	a := state.NewAggregate()
	report := make([]flowstate.Flow, 5)
	for i := range report {
		report[i] = flowstate.Flow{ID: flowstate.FlowID(i), Has: flowstate.HasStateSize}
	}
	a.Apply(1, report)
	_, ok := a.TakeChanges(nil, 5)
	require.True(t, ok)

	// Every flow leaves and comes back: recorded twice, five changes.
	a.Remove(1)
	a.Apply(1, report)
	got, ok := a.TakeChanges(nil, 5)
	require.True(t, ok, "five flows changed, within a limit of 5")
	assert.Equal(t, report, got)

	a.Remove(1)
	a.Apply(1, report)
	_, ok = a.TakeChanges(got, 4)
	assert.False(t, ok, "five flows changed, past a limit of 4")
}
