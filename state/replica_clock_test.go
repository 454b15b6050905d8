package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	clockpkg "github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// A Replica's deadlines are its clock's (ReplicaOptions.Clock): with a
// manual clock and an ApplyTimeout of an hour, a write the watch is late to
// apply, and a read barrier the watch does not reach, are given up once
// that clock has passed the hour, however little real time passed.

const clockApplyTimeout = time.Hour

// followOnClock runs a Replica on a manual clock, its watch stalled until
// the test ends.
// backgroundTimers are the timers of a following replica at rest.
const backgroundTimers = 2

func followOnClock(t *testing.T) (*kv.SharedMemory, *clockpkg.Manual, *worker) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	m := clockpkg.NewManual(time.Unix(1_700_000_000, 0))
	w := follow(t, mem, state.ReplicaOptions{Clock: m, ApplyTimeout: clockApplyTimeout})
	// The replica's and the lease's tickers, started by goroutines of
	// theirs: a test that counts the timers of what it starts counts from
	// them.
	require.True(t, m.AwaitWaiting(backgroundTimers, followWait), "the replica's and the lease's tickers")
	mem.StallWatches()
	t.Cleanup(mem.ResumeWatches) // before the replica stops
	return mem, m, w
}

func TestReplicaGivesUpAWriteTheWatchIsLateToApplyByItsClock(t *testing.T) {
	_, m, w := followOnClock(t)
	p := submit(t, w.mgr, 1, lastExecOf(1, 1)) // stored: the in-memory store answers at once
	var advanced time.Duration
	for range 100 {
		if answered(p) {
			break
		}
		m.Advance(clockApplyTimeout / 8) // a tick of the replica's clock
		advanced += clockApplyTimeout / 8
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond): // the tick may not have been taken yet
		}
	}
	require.True(t, answered(p), "answered as the clock passed its deadline")
	assert.ErrorIs(t, p.err, kv.ErrUnavailable)
	assert.ErrorIs(t, p.err, context.DeadlineExceeded, "the watch did not apply it in time")
	assert.GreaterOrEqual(t, advanced, clockApplyTimeout, "not before the clock passed ApplyTimeout")
}

func TestReplicaReadBarrierGivesUpByItsClock(t *testing.T) {
	mem, m, w := followOnClock(t)
	v := lastExecOf(2, 2)
	_, err := mem.Put(t.Context(), flowstate.NodeKey(2), flowstate.AppendJSON(nil, v.Flows())) // another worker's write
	require.NoError(t, err)
	timers := m.Waiting() // the replica's and the lease's tickers (followOnClock)
	done := make(chan error, 1)
	go func() { done <- w.mgr.Sync(t.Context()) }()
	require.True(t, m.AwaitWaiting(timers+1, followWait), "the barrier's deadline is a timer of the clock")
	select {
	case err := <-done:
		t.Fatalf("the barrier passed with the watch stalled: %v", err)
	default:
	}
	m.Advance(clockApplyTimeout)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(followWait):
		t.Fatal("the barrier did not give up once its clock passed ApplyTimeout")
	}
}
