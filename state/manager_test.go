package state_test

import (
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

func TestMergeMaxFallsBackWhenHolderLeavesOrLowers(t *testing.T) {
	const flow = flowstate.FlowID(7)
	full := func(size uint64, lastExec, start int64) flowstate.FlowStateValue {
		return value(sizes{flow: size}, times{flow: lastExec}, times{flow: start})
	}
	tests := []struct {
		name   string
		holder flowstate.FlowStateValue // node 2's second report
		want   flowstate.FlowStateValue
	}{
		{
			name:   "holder leaves with an empty report",
			holder: value(nil, nil, nil),
			want:   full(200, 2000, 20),
		},
		{
			name:   "holder lowers state_size",
			holder: full(50, 3000, 30),
			want:   full(200, 3000, 30),
		},
		{
			name:   "holder lowers last_exec_time",
			holder: full(300, 500, 30),
			want:   full(300, 2000, 30),
		},
		{
			name:   "holder lowers start_time",
			holder: full(300, 3000, 5),
			want:   full(300, 3000, 20),
		},
		{
			name:   "holder stops reporting state_size and start_time",
			holder: value(nil, times{flow: 3000}, nil),
			want:   full(200, 3000, 20),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, state.Options{})
			merge(t, m, 1, full(100, 1000, 10))
			merge(t, m, 2, full(300, 3000, 30)) // holds every max
			merge(t, m, 3, full(200, 2000, 20))
			got, _ := get(t, m)
			require.Equal(t, full(300, 3000, 30), got)

			res := merge(t, m, 2, tt.holder)

			assert.True(t, res.Changed)
			got, _ = get(t, m)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want, storedValue(t, m, flowstate.StateKey))
		})
	}
}

func TestMergeSameReportTwiceLeavesAggregateUnchanged(t *testing.T) {
	m := newManager(t, state.Options{})
	merge(t, m, 2, value(sizes{2: 20}, times{2: 200}, nil))
	report := value(sizes{1: 10}, times{1: 100}, times{1: 1})

	first := merge(t, m, 1, report)
	before, _ := get(t, m)
	storedBefore := m.Dump()[flowstate.StateKey]
	second := merge(t, m, 1, report)

	assert.True(t, first.Changed, "first report")
	assert.False(t, second.Changed, "same report again")
	assert.Greater(t, second.Revision, first.Revision)
	assert.Equal(t, first.Epoch, second.Epoch)
	after, ver := get(t, m)
	assert.Equal(t, before, after)
	assert.Equal(t, second.Version, ver)
	assert.Equal(t, storedBefore, m.Dump()[flowstate.StateKey])
}

func TestMergeExtremeNodeIDs(t *testing.T) {
	m := newManager(t, state.Options{})

	merge(t, m, 0, execState(times{1: 100}))
	merge(t, m, math.MaxUint64, execState(times{2: 200}))

	dump := m.Dump()
	assert.ElementsMatch(t, []string{
		"__flow/state",
		"__flow/state/node/0",
		"__flow/state/node/18446744073709551615",
	}, storedKeys(m))
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{"1":100},"start_time_map":{}}`,
		string(dump["__flow/state/node/0"]))
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{"2":200},"start_time_map":{}}`,
		string(dump["__flow/state/node/18446744073709551615"]))
	got, _ := get(t, m)
	assert.Equal(t, execState(times{1: 100, 2: 200}), got)

	// The extreme ids are independent nodes: replacing one keeps the other.
	merge(t, m, math.MaxUint64, execState(times{}))
	got, _ = get(t, m)
	assert.Equal(t, execState(times{1: 100}), got)
}

func TestMergeConcurrentNodesExactAggregate(t *testing.T) {
	const (
		nodes   = 100
		reports = 3 // per node, in order within its goroutine
		shared  = flowstate.FlowID(1_000_000)
	)
	// report r of node g: its own flow g+1, and the flow every node shares,
	// where the node holding each field's max differs.
	report := func(g, r int) flowstate.FlowStateValue {
		own := flowstate.FlowID(g + 1)
		return value(
			sizes{own: uint64(g*10 + r), shared: uint64(g*10 + r)},
			times{own: int64(1000*g + r), shared: int64(-10*g + r)},
			times{own: int64(g), shared: int64((g * 37) % nodes)},
		)
	}
	m := newManager(t, state.Options{})

	revs := make([][]uint64, nodes)
	var wg sync.WaitGroup
	for g := range nodes {
		wg.Go(func() {
			for r := range reports {
				res, err := m.Merge(t.Context(), state.Report{Node: uint64(g), Flows: report(g, r).Flows()})
				if !assert.NoError(t, err) {
					return
				}
				revs[g] = append(revs[g], res.Revision)
			}
		})
	}
	wg.Wait()

	want := value(sizes{}, times{}, times{})
	for g := range nodes {
		final := report(g, reports-1)
		for id, s := range final.StateSize {
			want.StateSize[id] = max(want.StateSize[id], s)
		}
		for id, ts := range final.LastExecTimeMap {
			if cur, ok := want.LastExecTimeMap[id]; !ok || ts > cur {
				want.LastExecTimeMap[id] = ts
			}
		}
		for id, ts := range final.StartTimeMap {
			if cur, ok := want.StartTimeMap[id]; !ok || ts > cur {
				want.StartTimeMap[id] = ts
			}
		}
	}
	require.Len(t, want.StateSize, nodes+1)
	require.Equal(t, uint64(992), want.StateSize[shared])
	require.Equal(t, int64(2), want.LastExecTimeMap[shared])
	require.Equal(t, int64(99), want.StartTimeMap[shared])

	got, ver := get(t, m)
	assert.Equal(t, want, got)
	assert.Equal(t, want, storedValue(t, m, flowstate.StateKey), "stored aggregate")
	for g := range nodes {
		assert.Equal(t, report(g, reports-1), storedValue(t, m, flowstate.NodeKey(uint64(g))), "stored report of node %d", g)
	}
	assert.Len(t, m.Dump(), nodes+1)

	var all []uint64
	for g := range nodes {
		assert.True(t, slices.IsSorted(revs[g]), "revisions of node %d: %v", g, revs[g])
		all = append(all, revs[g]...)
	}
	slices.Sort(all)
	assert.Len(t, slices.Compact(slices.Clone(all)), nodes*reports, "every merge has its own revision")
	assert.Equal(t, all[len(all)-1], ver.Revision, "get is at the last merge's revision")
}

func TestMergeAfterClearNoReportReappears(t *testing.T) {
	t.Run("get between clear and merge", func(t *testing.T) {
		m := newManager(t, state.Options{})
		merge(t, m, 1, execState(times{1: 100}))
		old := merge(t, m, 2, execState(times{2: 200}))
		require.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, m, flowstate.StateKey))

		m.Clear()
		v, ver := get(t, m)
		assert.Zero(t, ver.Revision)
		assert.NotEqual(t, old.Epoch, ver.Epoch)
		assert.True(t, isEmpty(v), "value at revision 0: %+v", v)
		assert.Empty(t, m.Dump(), "nothing stored in the new epoch")

		res := merge(t, m, 3, execState(times{3: 300}))
		assert.Equal(t, ver.Epoch, res.Epoch)
		v, _ = get(t, m)
		assert.Equal(t, execState(times{3: 300}), v)
		assert.ElementsMatch(t, []string{flowstate.StateKey, flowstate.NodeKey(3)}, storedKeys(m))
		assert.Equal(t, execState(times{3: 300}), storedValue(t, m, flowstate.StateKey))
	})
	t.Run("merge straight after clear", func(t *testing.T) {
		m := newManager(t, state.Options{})
		merge(t, m, 1, execState(times{1: 100}))

		m.Clear()
		merge(t, m, 2, execState(times{2: 200}))

		v, _ := get(t, m)
		assert.Equal(t, execState(times{2: 200}), v)
		assert.ElementsMatch(t, []string{flowstate.StateKey, flowstate.NodeKey(2)}, storedKeys(m))
		assert.Equal(t, execState(times{2: 200}), storedValue(t, m, flowstate.StateKey))
	})
}

func TestRevisionsStrictlyIncreaseAndMatchGet(t *testing.T) {
	m := newManager(t, state.Options{})
	_, ver := get(t, m)
	require.Zero(t, ver.Revision)
	last := ver.Revision
	check := func(step string, got flowstate.Version) {
		t.Helper()
		assert.Greater(t, got.Revision, last, step)
		last = got.Revision
		_, v := get(t, m)
		assert.Equal(t, got, v, "get after %s", step)
		cur, err := m.Version(t.Context())
		require.NoError(t, err)
		assert.Equal(t, got, cur, "version after %s", step)
	}
	for i := range 20 {
		node := uint64(i % 3)
		res := merge(t, m, node, execState(times{flowstate.FlowID(i % 5): int64(i)}))
		check("merge "+strconv.Itoa(i), res.Version)
		if i%4 == 0 { // the same report again: unchanged, new revision
			res := merge(t, m, node, execState(times{flowstate.FlowID(i % 5): int64(i)}))
			check("repeat "+strconv.Itoa(i), res.Version)
		}
	}
}

func TestEpochStaysAcrossMergesAndChangesOnClear(t *testing.T) {
	m := newManager(t, state.Options{})
	_, ver := get(t, m)
	epoch := ver.Epoch
	assert.NotEmpty(t, epoch, "a new Manager starts an epoch")
	for i := range 5 {
		res := merge(t, m, uint64(i), execState(times{flowstate.FlowID(i): 1}))
		assert.Equal(t, epoch, res.Epoch)
	}
	_, ver = get(t, m)
	assert.Equal(t, epoch, ver.Epoch)

	m.Clear()
	cur, err := m.Version(t.Context())
	require.NoError(t, err)
	newEpoch := cur.Epoch
	require.NotEqual(t, epoch, newEpoch)
	assert.Equal(t, flowstate.Version{Epoch: newEpoch}, cur)
	res := merge(t, m, 1, execState(times{1: 1}))
	assert.Equal(t, newEpoch, res.Epoch)
	assert.NotZero(t, res.Revision)
}

func TestMergeDoesNotRetainFlows(t *testing.T) {
	m := newManager(t, state.Options{})
	flows := value(sizes{1: 10}, times{1: 100}, times{1: 1}).Flows()
	_, err := m.Merge(t.Context(), state.Report{Node: 1, Flows: flows})
	require.NoError(t, err)

	flows[0].StateSize = 11
	flows[0].Has = flowstate.HasLastExecTime

	got, _ := get(t, m)
	assert.Equal(t, value(sizes{1: 10}, times{1: 100}, times{1: 1}), got)
}

func TestMergeFlowsLeavesOutFlowsWithoutFields(t *testing.T) {
	flows := []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 10, LastExecTime: 100},
		{ID: 2}, // no field: ignored
		{ID: 3, Has: flowstate.HasStartTime, StartTime: -3},
	}
	m := newManager(t, state.Options{})

	res, err := m.Merge(t.Context(), state.Report{Node: 1, Flows: flows})

	require.NoError(t, err)
	assert.True(t, res.Changed)
	want := value(sizes{1: 10}, times{1: 100}, times{3: -3})
	got, _ := get(t, m)
	assert.Equal(t, want, got)
	assert.Equal(t, want, storedValue(t, m, flowstate.NodeKey(1)))
	snap, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{flows[0], flows[2]}, snap.Flows)

	// The same report again changes nothing.
	res, err = m.Merge(t.Context(), state.Report{Node: 1, Flows: want.Flows()})
	require.NoError(t, err)
	assert.False(t, res.Changed)
}

func TestMergeFlowsRejectsUnsortedInput(t *testing.T) {
	tests := []struct {
		name  string
		flows []flowstate.Flow
	}{
		{"descending", []flowstate.Flow{{ID: 2, Has: flowstate.HasStateSize}, {ID: 1, Has: flowstate.HasStateSize}}},
		{"duplicate", []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize}, {ID: 1, Has: flowstate.HasLastExecTime}}},
		{"unsorted at the end", []flowstate.Flow{{ID: 1}, {ID: 5}, {ID: 9}, {ID: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, state.Options{})
			merge(t, m, 1, execState(times{1: 100}))
			beforeValue, beforeVersion := get(t, m)
			beforeDump := m.Dump()

			_, err := m.Merge(t.Context(), state.Report{Node: 1, Flows: tt.flows})

			assert.ErrorIs(t, err, state.ErrUnsortedFlows)
			v, ver := get(t, m)
			assert.Equal(t, beforeValue, v)
			assert.Equal(t, beforeVersion, ver)
			assert.Equal(t, beforeDump, m.Dump())
		})
	}
}

func TestMergeDoesNotAllocateInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m := newManager(t, state.Options{})
	ctx := t.Context()
	for node := range uint64(10) {
		merge(t, m, node, value(sizes{flowstate.FlowID(node): 1}, times{flowstate.FlowID(node): 1}, nil))
	}
	a := value(sizes{1: 10, 2: 20, 3: 30}, times{1: 100, 2: 200, 3: 300}, times{1: 1, 2: 2, 3: 3})
	b := value(sizes{1: 11, 2: 21, 3: 31}, times{1: 101, 2: 201, 3: 301}, times{1: 1, 2: 2, 3: 3})
	flowsA, flowsB := a.Flows(), b.Flows()
	// Warm up: the node, its flows and the scratch space exist.
	merge(t, m, 42, a)
	merge(t, m, 42, b)

	var err error
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		f := flowsA
		if i%2 == 1 {
			f = flowsB
		}
		i++
		_, err = m.Merge(ctx, state.Report{Node: 42, Flows: f})
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "allocations per MergeFlows")
}

func TestFirstEmptyReportOfEpochWritesStateKey(t *testing.T) {
	const empty = `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`
	m := newManager(t, state.Options{})

	// GreptimeDB's merge always writes the aggregate, so its get turns from
	// None to Some(empty) even when the report is empty.
	res := merge(t, m, 1, value(nil, nil, nil))

	assert.True(t, res.Changed, "None became Some")
	assert.NotZero(t, res.Revision)
	assert.Equal(t, empty, string(m.Dump()[flowstate.StateKey]))

	// The same after a clear.
	m.Clear()
	res = merge(t, m, 2, value(nil, nil, nil))
	assert.True(t, res.Changed, "None became Some after the clear")
	assert.Equal(t, empty, string(m.Dump()[flowstate.StateKey]))

	// Later empty reports change nothing.
	res = merge(t, m, 3, value(nil, nil, nil))
	assert.False(t, res.Changed)
}

func TestMergeMemoryStaysProportionalToReports(t *testing.T) {
	// Each node's report must be kept in a slice the size of the report, not
	// of the aggregate that Merge writes (which would hold nodes² flows).
	const nodes, flows = 300, 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newManager(t, state.Options{})
	for round := range 2 {
		for n := range nodes {
			v := value(make(sizes), make(times), nil)
			for f := range flows {
				id := flowstate.FlowID(n*flows + f)
				v.StateSize[id] = uint64(round)
				v.LastExecTimeMap[id] = int64(round)
			}
			merge(t, m, uint64(n), v)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)

	// About 1 MB is live (the reports, the aggregate, the store); the
	// aggregate's size per node would be 300 × 3,000 flows × 40 B = 36 MB.
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("live heap: %d bytes", live)
	assert.Less(t, live, int64(8<<20), "live heap after merging %d nodes × %d flows", nodes, flows)
}
