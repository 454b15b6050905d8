package kvtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// prefix is where the shared suite writes: a store may deliver keys of its
// own (an epoch key) to a watch, which the suite leaves out.
const prefix = "t/"

// RunShared runs the contract suite of kv.Shared against stores made by
// newStore, one new and empty store per subtest: conditional writes, the
// order of a watch, OpReset on a clear, LastRevision as a read barrier. Run
// Run too, for what every kv.Store does. newStore should register any
// cleanup with t.Cleanup.
func RunShared(t *testing.T, newStore func(t *testing.T) Shared) {
	runSuite(t, newStore, []subtest[Shared]{
		{"ConditionalWritesHoldOnTheLastWriteOfAKey", testConditional},
		{"RefusedConditionalWriteStoresNothing", testConditionalRefused},
		{"ConditionOnAnUnwrittenOrWipedKeyIsZero", testConditionZero},
		{"WatchDeliversResetCurrentSyncedThenLiveWritesInOrder", testWatchOrder},
		{"WatchStartsOverAtANewEpochOnClear", testWatchClear},
		{"LastRevisionIsAReadBarrierForEveryWatch", testReadBarrier},
	})
}

// Shared is a kv.Shared that the suite can wipe (Clear, as Store).
type Shared interface {
	kv.Shared
	Clear(ctx context.Context) error
}

func putIf(tb testing.TB, s kv.Shared, key, value string, cond kv.Condition) (kv.Revision, error) {
	tb.Helper()
	return s.PutIf(tb.Context(), prefix+key, []byte(value), kv.Condition{Key: prefix + cond.Key, Revision: cond.Revision})
}

func lastRevision(tb testing.TB, s kv.Shared) kv.Revision {
	tb.Helper()
	rev, err := s.LastRevision(tb.Context())
	require.NoError(tb, err)
	return rev
}

func testConditional(t *testing.T, s Shared) {
	ctx := t.Context()
	// Create-only: the first wins.
	first, err := putIf(t, s, "lease", "a", kv.Condition{Key: "lease"})
	require.NoError(t, err)
	_, err = putIf(t, s, "lease", "b", kv.Condition{Key: "lease"})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)

	// Compare-and-set on the key's revision.
	second, err := putIf(t, s, "lease", "a2", kv.Condition{Key: "lease", Revision: first.Seq})
	require.NoError(t, err)
	assert.Greater(t, second.Seq, first.Seq)
	_, err = putIf(t, s, "lease", "stale", kv.Condition{Key: "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	last, ok := kv.LastWriteOf(err)
	assert.True(t, ok && last == second.Seq, "the refusal names the key's last write, %d: %d (%t)", second.Seq, last, ok)

	// Fenced on another key.
	_, err = putIf(t, s, "agg", "v1", kv.Condition{Key: "lease", Revision: second.Seq})
	require.NoError(t, err)
	_, err = putIf(t, s, "agg", "v0", kv.Condition{Key: "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	assert.Equal(t, "v1", string(get(t, s, prefix+"agg").Value))
	assert.Equal(t, "a2", string(get(t, s, prefix+"lease").Value))

	// A conditional delete, then a create over the deletion's revision.
	_, err = s.DeleteIf(ctx, prefix+"lease", kv.Condition{Key: prefix + "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	del, err := s.DeleteIf(ctx, prefix+"lease", kv.Condition{Key: prefix + "lease", Revision: second.Seq})
	require.NoError(t, err)
	_, err = s.Get(ctx, prefix+"lease")
	require.ErrorIs(t, err, kv.ErrNotFound)
	_, err = putIf(t, s, "lease", "c", kv.Condition{Key: "lease"})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch, "the deletion is the key's last write")
	third, err := putIf(t, s, "lease", "c", kv.Condition{Key: "lease", Revision: del.Seq})
	require.NoError(t, err)
	assert.Equal(t, epoch(t, s), third.Epoch)
	assert.Equal(t, third.Seq, get(t, s, prefix+"lease").Revision)
}

func testConditionalRefused(t *testing.T, s Shared) {
	ctx := t.Context()
	rev := put(t, s, prefix+"k", "v")

	_, err := putIf(t, s, "k", "w", kv.Condition{Key: "k", Revision: rev.Seq + 1000})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	_, err = s.DeleteIf(ctx, prefix+"k", kv.Condition{Key: prefix + "k"})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	_, err = putIf(t, s, "other", "w", kv.Condition{Key: "k", Revision: rev.Seq - 1})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)

	assert.Equal(t, rev.Seq+1, put(t, s, prefix+"next", "x").Seq, "a refused write takes no sequence number")
	assert.Equal(t, kv.Entry{Key: prefix + "k", Value: []byte("v"), Revision: rev.Seq}, get(t, s, prefix+"k"))
	assert.Equal(t, []string{prefix + "k"}, present(t, s, prefix+"k", prefix+"other"))
}

func testConditionZero(t *testing.T, s Shared) {
	ctx := t.Context()
	// A key never written has revision 0.
	_, err := putIf(t, s, "agg", "v", kv.Condition{Key: "never", Revision: 1})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	_, err = putIf(t, s, "agg", "v", kv.Condition{Key: "never"})
	require.NoError(t, err)

	// After a clear, every key is unwritten again.
	lease, err := putIf(t, s, "lease", "a", kv.Condition{Key: "lease"})
	require.NoError(t, err)
	require.NoError(t, s.Clear(ctx))
	_, err = putIf(t, s, "agg", "v", kv.Condition{Key: "lease", Revision: lease.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch, "fenced on a write the clear wiped")
	_, err = putIf(t, s, "lease", "b", kv.Condition{Key: "lease"})
	require.NoError(t, err, "create-only after the clear")
}

func testWatchOrder(t *testing.T, s Shared) {
	ctx := t.Context()
	e := epoch(t, s)
	put(t, s, prefix+"a", "1")
	b := put(t, s, prefix+"b", "2")
	gone := put(t, s, prefix+"gone", "x")
	del, err := s.Delete(ctx, prefix+"gone")
	require.NoError(t, err)
	a2 := put(t, s, prefix+"a", "3")
	barrier := lastRevision(t, s)

	r := Watch(t, s)
	events := r.Await(t, "synced", func(ev []kv.Event) bool { return Count(ev, kv.OpSynced) == 1 })
	require.Equal(t, kv.OpReset, events[0].Op)
	assert.Equal(t, e, events[0].Revision.Epoch)
	var current []string
	for _, ev := range events[1 : len(events)-1] {
		assert.False(t, ev.Exact, "not exact before OpSynced: %v", ev)
		if !strings.HasPrefix(ev.Key, prefix) {
			continue
		}
		switch ev.Op {
		case kv.OpPut:
			current = append(current, fmt.Sprintf("%s=%s@%d", ev.Key, ev.Value, ev.Revision.Seq))
		case kv.OpDelete:
			current = append(current, fmt.Sprintf("%s deleted@%d", ev.Key, ev.Revision.Seq))
		}
	}
	assert.Equal(t, []string{fmt.Sprintf("t/b=2@%d", b.Seq), fmt.Sprintf("t/gone deleted@%d", del.Seq), fmt.Sprintf("t/a=3@%d", a2.Seq)}, current,
		"each key's last write, a deletion included, in sequence order")
	synced := events[len(events)-1]
	assert.Equal(t, kv.OpSynced, synced.Op)
	assert.True(t, synced.Exact)
	assert.Equal(t, e, synced.Revision.Epoch)
	assert.GreaterOrEqual(t, synced.Revision.Seq, barrier.Seq, "synced at or after the last write before the watch")
	assert.Greater(t, del.Seq, gone.Seq)

	c := put(t, s, prefix+"c", "4")
	d, err := s.Delete(ctx, prefix+"b")
	require.NoError(t, err)
	events = r.Await(t, "live writes", func(ev []kv.Event) bool { return Delivered(ev, d.Seq) })
	var live []kv.Event
	for _, ev := range events {
		if ev.Revision.Seq > synced.Revision.Seq && strings.HasPrefix(ev.Key, prefix) {
			live = append(live, ev)
		}
	}
	require.Len(t, live, 2)
	for i := range live {
		assert.False(t, live[i].Time.IsZero(), "the store's time of the write")
		live[i].Time = time.Time{}
	}
	assert.Equal(t, kv.Event{Op: kv.OpPut, Key: prefix + "c", Value: []byte("4"), Revision: kv.Revision{Epoch: e, Seq: c.Seq}, Exact: true}, live[0])
	assert.Equal(t, kv.Event{Op: kv.OpDelete, Key: prefix + "b", Revision: kv.Revision{Epoch: e, Seq: d.Seq}, Exact: true}, live[1])
	assert.GreaterOrEqual(t, lastRevision(t, s).Seq, d.Seq, "the barrier is at or past the last write")
}

func testWatchClear(t *testing.T, s Shared) {
	ctx := t.Context()
	before := epoch(t, s)
	put(t, s, prefix+"old", "v")
	r := Watch(t, s)
	r.Await(t, "synced", func(ev []kv.Event) bool { return Count(ev, kv.OpSynced) == 1 })

	for i := range 2 {
		require.NoError(t, s.Clear(ctx))
		after := epoch(t, s)
		require.NotEqual(t, before, after)
		events := r.Await(t, "reset after the clear", func(ev []kv.Event) bool {
			return Count(ev, kv.OpReset) == i+2 && Count(ev, kv.OpSynced) == i+2
		})
		reset, _ := LastOf(events, kv.OpReset)
		assert.Equal(t, after, reset.Revision.Epoch)
		assert.Empty(t, State(events, prefix), "nothing from the old epoch")

		w := put(t, s, prefix+"new", fmt.Sprint(i))
		assert.Equal(t, after, w.Epoch)
		events = r.Await(t, "a write in the new epoch", func(ev []kv.Event) bool { return Delivered(ev, w.Seq) })
		assert.Equal(t, map[string]string{prefix + "new": fmt.Sprint(i)}, State(events, prefix))
		last, _ := LastOf(events, kv.OpPut)
		assert.Equal(t, kv.Revision{Epoch: after, Seq: w.Seq}, last.Revision)
		before = after
	}
}

// testReadBarrier has writers write and delete at once under two watches:
// once a watch has delivered LastRevision, it has delivered every write
// acknowledged before, in sequence order, and what it delivered is the
// store's content, exactly.
func testReadBarrier(t *testing.T, s Shared) {
	ctx := t.Context()
	watches := []*Recorder{Watch(t, s), Watch(t, s)}
	const writers, rounds = 4, 25
	var (
		mu    sync.Mutex
		acked []kv.Revision
		wg    sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("%sw%d/k%d", prefix, w, i%4)
				rev, err := s.Put(ctx, key, []byte(fmt.Sprint(i)))
				if i%5 == 4 {
					rev, err = s.Delete(ctx, key)
				}
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				acked = append(acked, rev)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	barrier := lastRevision(t, s)
	want := map[string]string{}
	for w := range writers {
		for k := range 4 {
			key := fmt.Sprintf("%sw%d/k%d", prefix, w, k)
			e, err := s.Get(ctx, key)
			if errors.Is(err, kv.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			want[key] = string(e.Value)
		}
	}
	for _, rev := range acked {
		assert.LessOrEqual(t, rev.Seq, barrier.Seq)
	}
	for i, r := range watches {
		events := r.Await(t, fmt.Sprintf("watch %d at the barrier %d", i, barrier.Seq),
			func(ev []kv.Event) bool { return Delivered(ev, barrier.Seq) })
		assert.Equal(t, want, State(events, prefix), "watch %d", i)
		var last uint64
		for _, ev := range events {
			if ev.Op == kv.OpPut || ev.Op == kv.OpDelete {
				assert.Greater(t, ev.Revision.Seq, last, "watch %d: sequence order", i)
				last = ev.Revision.Seq
			}
		}
		final := events[len(events)-1]
		assert.True(t, final.Exact, "watch %d: exact once caught up: %v", i, final)
		assert.Equal(t, barrier.Epoch, final.Revision.Epoch)
	}
}
