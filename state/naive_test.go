package state_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// naiveManager is the seed's FlowStateManager ported as is: every merge puts
// the node's report, reads back every node's report, decodes them all,
// aggregates them by max and puts the aggregate. It is the baseline of the
// benchmarks and the reference of TestManagerMatchesNaive.
type naiveManager struct {
	store kv.Store
	mu    sync.Mutex // the seed's merge_lock: serialises merge
}

func newNaiveManager(store kv.Store) *naiveManager {
	return &naiveManager{store: store}
}

func (n *naiveManager) merge(ctx context.Context, nodeID uint64, incoming flowstate.FlowStateValue) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	// 1. Store this node's latest report under its per-node key.
	if _, err := n.store.Put(ctx, flowstate.NodeKey(nodeID), incoming.Encode()); err != nil {
		return err
	}

	// 2. Read back every per-node report and aggregate them.
	entries, err := n.store.Range(ctx, flowstate.NodeKeyPrefix)
	if err != nil {
		return err
	}
	stateSize := make(map[flowstate.FlowID]uint64)
	lastExecTimeMap := make(map[flowstate.FlowID]int64)
	startTimeMap := make(map[flowstate.FlowID]int64)
	for _, e := range entries {
		s, err := flowstate.DecodeValue(e.Value)
		if err != nil {
			return err
		}
		for id, size := range s.StateSize {
			if cur, ok := stateSize[id]; !ok || size > cur {
				stateSize[id] = size
			}
		}
		for id, ts := range s.LastExecTimeMap {
			if cur, ok := lastExecTimeMap[id]; !ok || ts > cur {
				lastExecTimeMap[id] = ts
			}
		}
		for id, ts := range s.StartTimeMap {
			if cur, ok := startTimeMap[id]; !ok || ts > cur {
				startTimeMap[id] = ts
			}
		}
	}

	// 3. Write the aggregated value to the global key.
	aggregated := flowstate.FlowStateValue{
		StateSize:       stateSize,
		LastExecTimeMap: lastExecTimeMap,
		StartTimeMap:    startTimeMap,
	}
	_, err = n.store.Put(ctx, flowstate.StateKey, aggregated.Encode())
	return err
}

// put is the seed's put: it writes the aggregate key.
func (n *naiveManager) put(ctx context.Context, v flowstate.FlowStateValue) error {
	_, err := n.store.Put(ctx, flowstate.StateKey, v.Encode())
	return err
}

// get is the seed's get: ok is false (None) when the aggregate key is absent.
func (n *naiveManager) get(ctx context.Context) (v flowstate.FlowStateValue, ok bool, err error) {
	e, err := n.store.Get(ctx, flowstate.StateKey)
	if errors.Is(err, kv.ErrNotFound) {
		return flowstate.FlowStateValue{}, false, nil
	}
	if err != nil {
		return flowstate.FlowStateValue{}, false, err
	}
	v, err = flowstate.DecodeValue(e.Value)
	return v, err == nil, err
}

// randomReport returns a report of a few of flows 0..15, each with a random
// subset of the fields, with values from small ranges so that nodes tie.
func randomReport(r *rand.Rand) flowstate.FlowStateValue {
	v := value(nil, nil, nil)
	if r.IntN(8) == 0 {
		return v // an empty report
	}
	for range r.IntN(6) {
		id := flowstate.FlowID(r.IntN(16))
		if r.IntN(2) == 0 {
			v.StateSize[id] = uint64(r.IntN(5))
		}
		if r.IntN(2) == 0 {
			v.LastExecTimeMap[id] = int64(r.IntN(7) - 3)
		}
		if r.IntN(3) == 0 {
			v.StartTimeMap[id] = int64(r.IntN(5) - 2)
		}
	}
	return v
}

func TestManagerMatchesNaive(t *testing.T) {
	for _, opts := range []state.Options{{}, {DeferAggregateWrite: true}} {
		t.Run("defer="+strconv.FormatBool(opts.DeferAggregateWrite), func(t *testing.T) {
			ctx := t.Context()
			r := rand.New(rand.NewPCG(1, 2)) // a fixed seed: failures replay
			naiveStore := kv.NewMemory()
			naive := newNaiveManager(naiveStore)
			m, store := newManager(t, opts)

			for step := range 3000 {
				switch {
				case r.IntN(200) == 0:
					require.NoError(t, naiveStore.Clear(ctx))
					require.NoError(t, store.Clear(ctx))
				case r.IntN(50) == 0:
					v := randomReport(r)
					require.NoError(t, naive.put(ctx, v))
					_, err := m.Put(ctx, v)
					require.NoError(t, err)
				default:
					node := uint64(r.IntN(8))
					report := randomReport(r)
					require.NoError(t, naive.merge(ctx, node, report))
					merge(t, m, node, report)
				}

				want, some, err := naive.get(ctx)
				require.NoError(t, err)
				got, ver := get(t, m)
				if !assert.Equal(t, some, ver.Revision != 0, "step %d: Some/None", step) ||
					!assert.True(t, want.Equal(got), "step %d: naive %+v, manager %+v", step, want, got) {
					return
				}
				flush(t, m)
				if !assert.Equal(t, stringValues(naiveStore.Dump()), stringValues(store.Dump()), "step %d: stored keys and bytes", step) {
					return
				}
			}
		})
	}
}
