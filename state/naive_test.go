package state_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// naiveManager is GreptimeDB's FlowStateManager ported as is, on a map that
// stands for its in-memory KV: every merge puts the node's report, reads
// back every node's report, decodes them all, aggregates them by max and
// puts the aggregate. It is the baseline of the benchmarks and the
// reference of TestManagerMatchesNaive.
type naiveManager struct {
	mu    sync.Mutex        // GreptimeDB's merge_lock: serialises merge
	store map[string][]byte // GreptimeDB's MemoryKvBackend
}

func newNaiveManager() *naiveManager {
	return &naiveManager{store: make(map[string][]byte)}
}

func (n *naiveManager) merge(_ context.Context, nodeID uint64, incoming flowstate.FlowStateValue) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	// 1. Store this node's latest report under its per-node key.
	n.store[flowstate.NodeKey(nodeID)] = encode(incoming)

	// 2. Read back every per-node report and aggregate them.
	stateSize := make(map[flowstate.FlowID]uint64)
	lastExecTimeMap := make(map[flowstate.FlowID]int64)
	startTimeMap := make(map[flowstate.FlowID]int64)
	for key, raw := range n.store {
		if !strings.HasPrefix(key, flowstate.NodeKeyPrefix) {
			continue
		}
		s, err := flowstate.DecodeValue(raw)
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
	n.store[flowstate.StateKey] = encode(flowstate.FlowStateValue{
		StateSize:       stateSize,
		LastExecTimeMap: lastExecTimeMap,
		StartTimeMap:    startTimeMap,
	})
	return nil
}

// clear is GreptimeDB's KV reset.
func (n *naiveManager) clear() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.store)
}

// get is GreptimeDB's get: ok is false (None) when the aggregate key is absent.
func (n *naiveManager) get() (v flowstate.FlowStateValue, ok bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	raw, ok := n.store[flowstate.StateKey]
	if !ok {
		return flowstate.FlowStateValue{}, false, nil
	}
	v, err = flowstate.DecodeValue(raw)
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

// TestManagerMatchesNaive runs random reports and KV resets through
// GreptimeDB's algorithm and the Manager: the same get after every step, and
// the same keys with the same bytes in GreptimeDB's store as in the
// Manager's Dump.
func TestManagerMatchesNaive(t *testing.T) {
	ctx := t.Context()
	r := rand.New(rand.NewPCG(1, 2)) // a fixed seed: failures replay
	naive := newNaiveManager()
	m := newManager(t, state.Options{})

	for step := range 3000 {
		switch {
		case r.IntN(200) == 0:
			naive.clear()
			m.Clear()
		default:
			node := uint64(r.IntN(8))
			report := randomReport(r)
			require.NoError(t, naive.merge(ctx, node, report))
			merge(t, m, node, report)
		}

		want, some, err := naive.get()
		require.NoError(t, err)
		got, ver := get(t, m)
		if !assert.Equal(t, some, ver.Revision != 0, "step %d: Some/None", step) ||
			!assert.True(t, want.Equal(got), "step %d: naive %+v, manager %+v", step, want, got) {
			return
		}
		if !assert.Equal(t, stringValues(naive.store), stringValues(m.Dump()), "step %d: stored keys and bytes", step) {
			return
		}
	}
}
