package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/kvtest"
)

func TestSharedMemory(t *testing.T) {
	kvtest.Run(t, func(*testing.T) kvtest.Store { return kv.NewSharedMemory(kv.SharedMemoryOptions{}) })
	kvtest.RunShared(t, func(*testing.T) kvtest.Shared { return kv.NewSharedMemory(kv.SharedMemoryOptions{}) })
	kvtest.RunAsync(t, func(*testing.T) kvtest.AsyncShared { return kv.NewSharedMemory(kv.SharedMemoryOptions{}) })
}

func TestSharedMemoryStampsEventsWithItsClock(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := kv.NewSharedMemory(kv.SharedMemoryOptions{Now: func() time.Time { return now }})
	_, err := s.Put(t.Context(), "a", []byte("1"))
	require.NoError(t, err)
	r := kvtest.Watch(t, s)
	now = now.Add(time.Minute) // the watch reads no clock: the write's time is kept
	events := r.Await(t, "synced", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpSynced) == 1 })
	require.Len(t, events, 3)
	assert.Equal(t, now.Add(-time.Minute), events[1].Time)
}

func TestSharedMemoryUnavailableFailsEveryCallAndStoresNothing(t *testing.T) {
	s := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	ctx := t.Context()
	rev, err := s.Put(ctx, "k", []byte("1"))
	require.NoError(t, err)

	s.SetUnavailable(true)
	assert.False(t, s.Available())
	calls := map[string]func() error{
		"put":           func() error { _, err := s.Put(ctx, "k", []byte("2")); return err },
		"put if":        func() error { _, err := s.PutIf(ctx, "k", nil, kv.Condition{Key: "k", Revision: rev.Seq}); return err },
		"delete":        func() error { _, err := s.Delete(ctx, "k"); return err },
		"delete if":     func() error { _, err := s.DeleteIf(ctx, "k", kv.Condition{Key: "k", Revision: rev.Seq}); return err },
		"get":           func() error { _, err := s.Get(ctx, "k"); return err },
		"clear":         func() error { return s.Clear(ctx) },
		"epoch":         func() error { _, err := s.Epoch(ctx); return err },
		"last revision": func() error { _, err := s.LastRevision(ctx); return err },
	}
	for name, call := range calls {
		assert.ErrorIs(t, call(), kv.ErrUnavailable, name)
	}

	s.SetUnavailable(false)
	assert.True(t, s.Available())
	e, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, kv.Entry{Key: "k", Value: []byte("1"), Revision: rev.Seq}, e)
	last, err := s.LastRevision(ctx)
	require.NoError(t, err)
	assert.Equal(t, rev.Seq, last.Seq)
}

// TestSharedMemoryStalledWatchSkipsReplacedWrites stalls a watch, writes
// behind its back, and resumes it: it skips what later writes replaced, and
// is exact again once it has caught up, as a bucket's watch is.
func TestSharedMemoryStalledWatchSkipsReplacedWrites(t *testing.T) {
	s := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	ctx := t.Context()
	r := kvtest.Watch(t, s)
	r.Await(t, "synced", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpSynced) == 1 })

	s.StallWatches()
	put := func(key, value string) kv.Revision {
		rev, err := s.Put(ctx, key, []byte(value))
		require.NoError(t, err)
		return rev
	}
	a1 := put("a", "1")
	b1 := put("b", "1")
	a2 := put("a", "2")
	require.NoError(t, s.Clear(ctx))
	c := put("c", "1")
	// A second watch started while stalled delivers nothing either.
	r2 := kvtest.Watch(t, s)
	// A fact, not a sleep: a read barrier the watches have not reached.
	last, err := s.LastRevision(ctx)
	require.NoError(t, err)
	assert.False(t, kvtest.Delivered(r.Events(), last.Seq))
	assert.Len(t, r.Events(), 2, "reset and synced only")
	assert.Empty(t, r2.Events())
	assert.Greater(t, a2.Seq, b1.Seq)
	assert.Greater(t, b1.Seq, a1.Seq)

	s.ResumeWatches()
	events := r.Await(t, "caught up", func(ev []kv.Event) bool { return kvtest.Delivered(ev, c.Seq) })
	epoch, err := s.Epoch(ctx)
	require.NoError(t, err)
	assert.Equal(t, []kv.Event{
		{Op: kv.OpReset, Revision: kv.Revision{Epoch: epoch}},
		{Op: kv.OpPut, Key: "c", Value: []byte("1"), Revision: kv.Revision{Epoch: epoch, Seq: c.Seq}},
		{Op: kv.OpSynced, Revision: kv.Revision{Epoch: epoch, Seq: c.Seq}, Exact: true},
	}, stripTimes(events[2:]), "the cleared epoch's writes are gone")
	r2.Await(t, "second watch", func(ev []kv.Event) bool { return kvtest.Delivered(ev, c.Seq) })

	// Behind without a clear: b is delivered inexact (a's first write was
	// replaced), then a's last write exactly.
	s.StallWatches()
	x1 := put("x", "1")
	y1 := put("y", "1")
	x2 := put("x", "2")
	s.ResumeWatches()
	events = r.Await(t, "caught up again", func(ev []kv.Event) bool { return kvtest.Delivered(ev, x2.Seq) })
	assert.Equal(t, []kv.Event{
		{Op: kv.OpPut, Key: "y", Value: []byte("1"), Revision: kv.Revision{Epoch: epoch, Seq: y1.Seq}, Exact: false},
		{Op: kv.OpPut, Key: "x", Value: []byte("2"), Revision: kv.Revision{Epoch: epoch, Seq: x2.Seq}, Exact: true},
	}, stripTimes(events[len(events)-2:]))
	assert.Greater(t, y1.Seq, x1.Seq)
}

func TestSharedMemoryWatchReturnsWhenItsContextEndsWhileStalled(t *testing.T) {
	s := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	s.StallWatches()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, s.Watch(ctx, func(kv.Event) { t.Error("no event while stalled") }), context.Canceled)
}

func stripTimes(events []kv.Event) []kv.Event {
	out := make([]kv.Event, len(events))
	for i, e := range events {
		e.Time = time.Time{}
		out[i] = e
	}
	return out
}

func TestSharedMemoryLostAcksAreStoredAndWatched(t *testing.T) {
	s := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	ctx := t.Context()
	r := kvtest.Watch(t, s)
	s.LoseAcks(2)
	_, err := s.Put(ctx, "a", []byte("1"))
	require.ErrorIs(t, err, kv.ErrUnavailable)
	_, err = s.PutIf(ctx, "b", []byte("2"), kv.Condition{Key: "b"})
	require.ErrorIs(t, err, kv.ErrUnavailable)
	rev, err := s.Put(ctx, "c", []byte("3"))
	require.NoError(t, err, "only two acks lost")

	assert.Equal(t, uint64(3), rev.Seq, "the lost writes took sequence numbers")
	for _, key := range []string{"a", "b", "c"} {
		_, err := s.Get(ctx, key)
		assert.NoError(t, err, "%s is stored", key)
	}
	events := r.Await(t, "all three", func(ev []kv.Event) bool { return kvtest.Delivered(ev, rev.Seq) })
	assert.Equal(t, map[string]string{"a": "1", "b": "2", "c": "3"}, kvtest.State(events, ""))
}
