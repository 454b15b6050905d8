package jetstream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
	"github.com/flowstate-io/flowstate/kv"
)

// Callers that arrive while a round is in flight share the next one, which
// starts after they arrived: ten callers behind a round in flight cost one
// more call, and none of them gets the result of the round that started
// before it.
func TestRoundsShareOneCallStartedAfterTheCallersArrived(t *testing.T) {
	var r rounds
	var calls atomic.Uint64
	release := make(chan struct{})
	fn := func(context.Context) (kv.Revision, error) {
		n := calls.Add(1)
		if n == 1 {
			<-release
		}
		return kv.Revision{Seq: n}, nil
	}
	first := make(chan kv.Revision, 1)
	go func() {
		rev, _ := r.do(t.Context(), fn)
		first <- rev
	}()
	awaitRounds(t, &r, func() bool { return r.running != nil })

	var wg sync.WaitGroup
	got := make(chan kv.Revision, 10)
	for range 10 {
		wg.Go(func() {
			rev, err := r.do(t.Context(), fn)
			assert.NoError(t, err)
			got <- rev
		})
	}
	awaitRounds(t, &r, func() bool { return r.next != nil && r.next.callers == 10 })
	assert.Equal(t, uint64(1), calls.Load(), "the waiting callers did not start a round of their own")
	close(release)
	wg.Wait()
	close(got)
	assert.Equal(t, kv.Revision{Seq: 1}, <-first)
	for rev := range got {
		assert.Equal(t, kv.Revision{Seq: 2}, rev, "the round that started after the caller arrived")
	}
	assert.Equal(t, uint64(2), calls.Load())
}

// A caller whose context ends stops waiting; the round it joined still
// runs for the others.
func TestRoundsCallerWhoseContextEndsStopsWaiting(t *testing.T) {
	var r rounds
	release := make(chan struct{})
	var calls atomic.Uint64
	fn := func(context.Context) (kv.Revision, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		return kv.Revision{Seq: 7}, nil
	}
	go func() { _, _ = r.do(context.Background(), fn) }()
	awaitRounds(t, &r, func() bool { return r.running != nil })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.do(ctx, fn)
		done <- err
	}()
	awaitRounds(t, &r, func() bool { return r.next != nil && r.next.callers == 1 })
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a caller whose context ended still waits")
	}
	close(release)
	rev, err := r.do(t.Context(), fn)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), rev.Seq)
}

// awaitRounds waits, for at most 5 s, until cond holds under r's lock.
func awaitRounds(t *testing.T, r *rounds, cond func() bool) {
	t.Helper()
	wait.Until(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return cond(), "rounds never reached the state the test waits for"
	})
}
