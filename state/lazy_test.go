package state_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// encodedMemory is a kv.Memory seen only through kv.Store, so that a
// Manager over it encodes every value when it writes it.
type encodedMemory struct{ kv.Store }

// TestLazyValuesStoreTheSameBytes runs the same operations through a Manager
// over kv.Memory (values rendered when read) and one over a store that takes
// bytes: after each step both stores hold the same keys and bytes.
func TestLazyValuesStoreTheSameBytes(t *testing.T) {
	for _, opts := range []state.Options{{}, {DeferAggregateWrite: true}} {
		t.Run(map[bool]string{false: "eager", true: "deferred"}[opts.DeferAggregateWrite], func(t *testing.T) {
			ctx := t.Context()
			clock := time.Unix(1_700_000_000, 0)
			opts.Now = func() time.Time { return clock }
			lazyStore, encStore := kv.NewMemory(), kv.NewMemory()
			lazy := state.NewManager(lazyStore, opts)
			enc := state.NewManager(encodedMemory{encStore}, opts)
			both := func(step string, f func(m *state.Manager, s *kv.Memory) error) {
				t.Helper()
				require.NoError(t, f(lazy, lazyStore), "%s (lazy)", step)
				require.NoError(t, f(enc, encStore), "%s (encoded)", step)
				require.NoError(t, lazy.Flush(ctx))
				require.NoError(t, enc.Flush(ctx))
				assert.Equal(t, stringValues(encStore.Dump()), stringValues(lazyStore.Dump()), "after %s", step)
			}
			mergeAll := func(step string, node uint64, v flowstate.FlowStateValue) {
				both(step, func(m *state.Manager, _ *kv.Memory) error {
					_, err := m.Merge(ctx, node, v)
					return err
				})
			}
			mergeAll("first report", 1, value(sizes{1: 10, 2: 20}, times{1: 100}, times{2: 5}))
			mergeAll("second node", 2, value(sizes{2: 30, 7: 1}, times{2: 50, 7: -3}, nil))
			for i := range 5 { // both buffers of node 1, several times
				mergeAll("replace", 1, value(sizes{1: uint64(11 + i), 3: 5}, times{3: int64(i)}, nil))
			}
			mergeAll("empty report", 2, value(nil, nil, nil))
			both("put", func(m *state.Manager, _ *kv.Memory) error {
				_, err := m.Put(ctx, value(sizes{9: 9}, nil, nil))
				return err
			})
			mergeAll("merge after put", 3, value(sizes{4: 4}, times{4: 4}, times{4: 4}))
			clock = clock.Add(time.Minute)
			mergeAll("fresh report", 3, value(sizes{4: 5}, times{4: 4}, times{4: 4}))
			both("evict", func(m *state.Manager, _ *kv.Memory) error {
				_, _, err := m.EvictSilent(ctx, clock)
				return err
			})
			both("clear", func(_ *state.Manager, s *kv.Memory) error { return s.Clear(ctx) })
			mergeAll("merge after clear", 3, value(sizes{5: 5}, nil, nil))
			mergeAll("again", 3, value(sizes{5: 6}, nil, nil))
		})
	}
}

// TestLazyValuesReadWhileMerging reads every key of the store while merges
// and flushes change them: each read is a whole value (and, under -race,
// there is no data race between the store's renders and the merges).
func TestLazyValuesReadWhileMerging(t *testing.T) {
	m, store := newManager(t, state.Options{DeferAggregateWrite: true})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				entries, err := store.Range(ctx, "")
				if !assert.NoError(t, err) {
					return
				}
				for _, e := range entries {
					if _, err := flowstate.DecodeValue(e.Value); !assert.NoError(t, err, "%s: %s", e.Key, e.Value) {
						return
					}
				}
			}
		})
	}
	for i := range 3000 {
		merge(t, m, uint64(i%7), value(sizes{flowstate.FlowID(i % 11): uint64(i)}, times{flowstate.FlowID(i % 13): int64(i)}, nil))
		if i%10 == 0 {
			flush(t, m)
		}
	}
	cancel()
	wg.Wait()
	flush(t, m)
	v, _ := get(t, m)
	assert.Equal(t, v, storedValue(t, store, flowstate.StateKey))
}
