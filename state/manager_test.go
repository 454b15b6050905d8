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
			m, store := newManager(t, state.Options{})
			merge(t, m, 1, full(100, 1000, 10))
			merge(t, m, 2, full(300, 3000, 30)) // holds every max
			merge(t, m, 3, full(200, 2000, 20))
			got, _ := get(t, m)
			require.Equal(t, full(300, 3000, 30), got)

			res := merge(t, m, 2, tt.holder)

			assert.True(t, res.Changed)
			got, _ = get(t, m)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want, storedValue(t, store, flowstate.StateKey))
		})
	}
}

func TestMergeSameReportTwiceLeavesAggregateUnchanged(t *testing.T) {
	m, store := newManager(t, state.Options{})
	merge(t, m, 2, value(sizes{2: 20}, times{2: 200}, nil))
	report := value(sizes{1: 10}, times{1: 100}, times{1: 1})

	first := merge(t, m, 1, report)
	before, _ := get(t, m)
	storedBefore := store.Dump()[flowstate.StateKey]
	second := merge(t, m, 1, report)

	assert.True(t, first.Changed, "first report")
	assert.False(t, second.Changed, "same report again")
	assert.Greater(t, second.Revision, first.Revision)
	assert.Equal(t, first.Epoch, second.Epoch)
	after, ver := get(t, m)
	assert.Equal(t, before, after)
	assert.Equal(t, second.Version, ver)
	assert.Equal(t, storedBefore, store.Dump()[flowstate.StateKey])
}

func TestMergeExtremeNodeIDs(t *testing.T) {
	m, store := newManager(t, state.Options{})

	merge(t, m, 0, execState(times{1: 100}))
	merge(t, m, math.MaxUint64, execState(times{2: 200}))

	dump := store.Dump()
	assert.ElementsMatch(t, []string{
		"__flow/state",
		"__flow/state/node/0",
		"__flow/state/node/18446744073709551615",
	}, storedKeys(store))
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
	m, store := newManager(t, state.Options{})

	revs := make([][]uint64, nodes)
	var wg sync.WaitGroup
	for g := range nodes {
		wg.Go(func() {
			for r := range reports {
				res, err := m.Merge(t.Context(), uint64(g), report(g, r))
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
	assert.Equal(t, want, storedValue(t, store, flowstate.StateKey), "stored aggregate")
	for g := range nodes {
		assert.Equal(t, report(g, reports-1), storedValue(t, store, flowstate.NodeKey(uint64(g))), "stored report of node %d", g)
	}
	assert.Len(t, store.Dump(), nodes+1)

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
	for _, opts := range []state.Options{{}, {DeferAggregateWrite: true}} {
		t.Run("defer="+strconv.FormatBool(opts.DeferAggregateWrite), func(t *testing.T) {
			t.Run("get between clear and merge", func(t *testing.T) {
				m, store := newManager(t, opts)
				merge(t, m, 1, execState(times{1: 100}))
				old := merge(t, m, 2, execState(times{2: 200}))
				flush(t, m)
				require.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, store, flowstate.StateKey))

				require.NoError(t, store.Clear(t.Context()))
				v, ver := get(t, m)
				assert.Zero(t, ver.Revision)
				assert.NotEqual(t, old.Epoch, ver.Epoch)
				assert.True(t, v.IsEmpty(), "value at revision 0: %+v", v)
				flush(t, m) // nothing to write in the new epoch
				assert.Empty(t, store.Dump())

				res := merge(t, m, 3, execState(times{3: 300}))
				assert.Equal(t, ver.Epoch, res.Epoch)
				v, _ = get(t, m)
				assert.Equal(t, execState(times{3: 300}), v)
				flush(t, m)
				assert.ElementsMatch(t, []string{flowstate.StateKey, flowstate.NodeKey(3)}, storedKeys(store))
				assert.Equal(t, execState(times{3: 300}), storedValue(t, store, flowstate.StateKey))
			})
			t.Run("merge straight after clear", func(t *testing.T) {
				m, store := newManager(t, opts)
				merge(t, m, 1, execState(times{1: 100}))
				flush(t, m)

				require.NoError(t, store.Clear(t.Context()))
				merge(t, m, 2, execState(times{2: 200}))

				v, _ := get(t, m)
				assert.Equal(t, execState(times{2: 200}), v)
				flush(t, m)
				assert.ElementsMatch(t, []string{flowstate.StateKey, flowstate.NodeKey(2)}, storedKeys(store))
				assert.Equal(t, execState(times{2: 200}), storedValue(t, store, flowstate.StateKey))
			})
		})
	}
}

func TestFlushAfterClearDoesNotStoreStaleAggregate(t *testing.T) {
	m, store := newManager(t, state.Options{DeferAggregateWrite: true})
	merge(t, m, 1, execState(times{1: 100})) // not flushed yet

	require.NoError(t, store.Clear(t.Context()))
	err := m.Flush(t.Context())

	assert.ErrorIs(t, err, state.ErrStoreCleared)
	assert.Empty(t, store.Dump(), "the aggregate of the old epoch must not stay stored")
	v, ver := get(t, m)
	assert.Zero(t, ver.Revision)
	assert.True(t, v.IsEmpty(), "value at revision 0: %+v", v)
}

func TestDeferAggregateWriteLeavesStateKeyUntilFlush(t *testing.T) {
	m, store := newManager(t, state.Options{DeferAggregateWrite: true})

	res := merge(t, m, 1, execState(times{1: 100}))
	assert.True(t, res.Changed)
	assert.NotContains(t, store.Dump(), flowstate.StateKey)
	assert.Contains(t, store.Dump(), flowstate.NodeKey(1))
	merge(t, m, 2, execState(times{2: 200}))
	assert.NotContains(t, store.Dump(), flowstate.StateKey)
	v, ver := get(t, m) // current without a flush
	assert.Equal(t, execState(times{1: 100, 2: 200}), v)
	assert.NotZero(t, ver.Revision)

	flush(t, m)
	require.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, store, flowstate.StateKey))
	written, err := store.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err)

	// Nothing changed: neither a flush nor an unchanged report rewrites it.
	flush(t, m)
	merge(t, m, 1, execState(times{1: 100}))
	flush(t, m)
	again, err := store.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err)
	assert.Equal(t, written.Revision, again.Revision, "the aggregate key was rewritten without a change")

	// A change is visible at once and stored at the next flush.
	merge(t, m, 1, execState(times{1: 150}))
	v, _ = get(t, m)
	assert.Equal(t, execState(times{1: 150, 2: 200}), v)
	assert.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, store, flowstate.StateKey))
	flush(t, m)
	assert.Equal(t, execState(times{1: 150, 2: 200}), storedValue(t, store, flowstate.StateKey))
}

func TestMergeWithoutDeferWritesStateKeyEveryChange(t *testing.T) {
	m, store := newManager(t, state.Options{})
	merge(t, m, 1, execState(times{1: 100}))
	assert.Equal(t, execState(times{1: 100}), storedValue(t, store, flowstate.StateKey))
	merge(t, m, 2, execState(times{2: 200}))
	assert.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, store, flowstate.StateKey))

	before, err := store.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err)
	flush(t, m) // Merge has already written it
	after, err := store.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err)
	assert.Equal(t, before.Revision, after.Revision)
}

func TestPutThenMergeReplacesPutValue(t *testing.T) {
	m, store := newManager(t, state.Options{})
	merge(t, m, 1, execState(times{1: 100}))

	put := value(sizes{9: 900}, times{9: 9000}, times{9: 9})
	ver, err := m.Put(t.Context(), put)
	require.NoError(t, err)
	v, got := get(t, m)
	assert.Equal(t, put, v, "get returns what was put")
	assert.Equal(t, ver, got)
	assert.Equal(t, put, storedValue(t, store, flowstate.StateKey))

	// As in the seed, the next merge aggregates the nodes' reports again:
	// the put value is gone.
	res := merge(t, m, 2, execState(times{2: 200}))
	assert.True(t, res.Changed)
	assert.Greater(t, res.Revision, ver.Revision)
	v, _ = get(t, m)
	assert.Equal(t, execState(times{1: 100, 2: 200}), v)
	assert.Equal(t, execState(times{1: 100, 2: 200}), storedValue(t, store, flowstate.StateKey))
}

func TestPutEmptyValueOverridesAggregate(t *testing.T) {
	m, store := newManager(t, state.Options{})
	merge(t, m, 1, execState(times{1: 100}))

	ver, err := m.Put(t.Context(), flowstate.FlowStateValue{})
	require.NoError(t, err)

	v, got := get(t, m)
	assert.True(t, v.IsEmpty(), "get after putting an empty value: %+v", v)
	assert.Equal(t, ver, got)
	assert.NotZero(t, got.Revision, "an empty put is the seed's Some(empty), not None")
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`,
		string(store.Dump()[flowstate.StateKey]))
}

func TestPutBeforeAnyMerge(t *testing.T) {
	m, _ := newManager(t, state.Options{})
	put := execState(times{5: 500})
	ver, err := m.Put(t.Context(), put)
	require.NoError(t, err)
	v, got := get(t, m)
	assert.Equal(t, put, v)
	assert.Equal(t, ver, got)
	assert.NotZero(t, got.Revision)

	merge(t, m, 1, execState(times{1: 100}))
	v, _ = get(t, m)
	assert.Equal(t, execState(times{1: 100}), v)
}

func TestRevisionsStrictlyIncreaseAndMatchGet(t *testing.T) {
	for _, opts := range []state.Options{{}, {DeferAggregateWrite: true}} {
		t.Run("defer="+strconv.FormatBool(opts.DeferAggregateWrite), func(t *testing.T) {
			m, _ := newManager(t, opts)
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
				if i%7 == 0 {
					flush(t, m)
				}
				if i%9 == 0 {
					ver, err := m.Put(t.Context(), execState(times{99: int64(i)}))
					require.NoError(t, err)
					check("put "+strconv.Itoa(i), ver)
				}
				if i%4 == 0 { // the same report again: unchanged, new revision
					res := merge(t, m, node, execState(times{flowstate.FlowID(i % 5): int64(i)}))
					check("repeat "+strconv.Itoa(i), res.Version)
				}
			}
		})
	}
}

func TestEpochStaysAcrossMergesAndChangesOnClear(t *testing.T) {
	m, store := newManager(t, state.Options{})
	epoch, err := store.Epoch(t.Context())
	require.NoError(t, err)

	_, ver := get(t, m)
	assert.Equal(t, epoch, ver.Epoch, "get before any merge")
	for i := range 5 {
		res := merge(t, m, uint64(i), execState(times{flowstate.FlowID(i): 1}))
		assert.Equal(t, epoch, res.Epoch)
	}
	_, ver = get(t, m)
	assert.Equal(t, epoch, ver.Epoch)

	require.NoError(t, store.Clear(t.Context()))
	newEpoch, err := store.Epoch(t.Context())
	require.NoError(t, err)
	require.NotEqual(t, epoch, newEpoch)
	cur, err := m.Version(t.Context())
	require.NoError(t, err)
	assert.Equal(t, flowstate.Version{Epoch: newEpoch}, cur)
	res := merge(t, m, 1, execState(times{1: 1}))
	assert.Equal(t, newEpoch, res.Epoch)
	assert.NotZero(t, res.Revision)
}

func TestMergeDoesNotRetainValue(t *testing.T) {
	m, _ := newManager(t, state.Options{})
	v := value(sizes{1: 10}, times{1: 100}, times{1: 1})
	merge(t, m, 1, v)

	v.StateSize[1] = 11
	v.LastExecTimeMap[2] = 200
	delete(v.StartTimeMap, 1)

	got, _ := get(t, m)
	assert.Equal(t, value(sizes{1: 10}, times{1: 100}, times{1: 1}), got)
}

func TestMergeFlowsMatchesMerge(t *testing.T) {
	flows := []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 10, LastExecTime: 100},
		{ID: 2}, // no field: ignored
		{ID: 3, Has: flowstate.HasStartTime, StartTime: -3},
	}
	m, store := newManager(t, state.Options{})

	res, err := m.MergeFlows(t.Context(), 1, flows)

	require.NoError(t, err)
	assert.True(t, res.Changed)
	want := value(sizes{1: 10}, times{1: 100}, times{3: -3})
	got, _ := get(t, m)
	assert.Equal(t, want, got)
	assert.Equal(t, want, storedValue(t, store, flowstate.NodeKey(1)))
	snap, err := m.Snapshot(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{flows[0], flows[2]}, snap.Flows)

	// Merge of the same report changes nothing.
	res, err = m.Merge(t.Context(), 1, want)
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
			m, store := newManager(t, state.Options{})
			merge(t, m, 1, execState(times{1: 100}))
			beforeValue, beforeVersion := get(t, m)
			beforeDump := store.Dump()

			_, err := m.MergeFlows(t.Context(), 1, tt.flows)

			assert.ErrorIs(t, err, state.ErrUnsortedFlows)
			v, ver := get(t, m)
			assert.Equal(t, beforeValue, v)
			assert.Equal(t, beforeVersion, ver)
			assert.Equal(t, beforeDump, store.Dump())
		})
	}
}

func TestMergeDoesNotAllocateInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, _ := newManager(t, state.Options{DeferAggregateWrite: true})
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
		v := a
		if i%2 == 1 {
			v = b
		}
		i++
		_, err = m.Merge(ctx, 42, v)
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "allocations per Merge")

	allocs = testing.AllocsPerRun(100, func() {
		f := flowsA
		if i%2 == 1 {
			f = flowsB
		}
		i++
		_, err = m.MergeFlows(ctx, 42, f)
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "allocations per MergeFlows")
}

func TestFirstEmptyReportOfEpochWritesStateKey(t *testing.T) {
	const empty = `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`
	for _, opts := range []state.Options{{}, {DeferAggregateWrite: true}} {
		t.Run("defer="+strconv.FormatBool(opts.DeferAggregateWrite), func(t *testing.T) {
			m, store := newManager(t, opts)

			// The seed's merge always writes the aggregate, so its get turns
			// from None to Some(empty) even when the report is empty.
			res := merge(t, m, 1, value(nil, nil, nil))
			flush(t, m)

			assert.True(t, res.Changed, "None became Some")
			assert.NotZero(t, res.Revision)
			assert.Equal(t, empty, string(store.Dump()[flowstate.StateKey]))

			// The same after a clear.
			require.NoError(t, store.Clear(t.Context()))
			res = merge(t, m, 2, value(nil, nil, nil))
			flush(t, m)
			assert.True(t, res.Changed, "None became Some after the clear")
			assert.Equal(t, empty, string(store.Dump()[flowstate.StateKey]))

			// Later empty reports change nothing.
			res = merge(t, m, 3, value(nil, nil, nil))
			assert.False(t, res.Changed)
		})
	}
}

func TestMergeMemoryStaysProportionalToReports(t *testing.T) {
	// Each node's report must be kept in a slice the size of the report, not
	// of the aggregate that Merge writes (which would hold nodes² flows).
	const nodes, flows = 300, 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, _ := newManager(t, state.Options{})
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

// TestFlushConcurrentWithMergesEndsOnTheLastAggregate flushes while merges
// go on (Flush encodes outside the lock): the key written last, after a
// final Flush, is the aggregate of every merge.
func TestFlushConcurrentWithMergesEndsOnTheLastAggregate(t *testing.T) {
	m, store := newManager(t, state.Options{DeferAggregateWrite: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			merge(t, m, uint64(i%50), flowstate.FlowStateValue{StateSize: sizes{flowstate.FlowID(i % 50): uint64(i)}})
		}
	}()
	for flushing := true; flushing; {
		select {
		case <-done:
			flushing = false
		default:
			require.NoError(t, m.Flush(t.Context()))
		}
	}
	require.NoError(t, m.Flush(t.Context()))
	v, _ := get(t, m)
	assert.Equal(t, string(v.Encode()), string(store.Dump()[flowstate.StateKey]))
}
