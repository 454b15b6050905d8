package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ended waits (real time, bounded) until ctx ends.
func ended(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end within 10 s")
	}
}

// A context of a clock other than Real ends when that clock passes its
// timeout, as a deadline does, and so do the contexts derived from it,
// with the same error; its Deadline is its parent's.
func TestWithTimeoutEndsByTheClocksReading(t *testing.T) {
	m := NewManual(start)
	ctx, cancel := WithTimeout(t.Context(), m, 2*time.Second)
	defer cancel()
	child, cancelChild := context.WithTimeout(ctx, time.Hour)
	defer cancelChild()
	_, has := ctx.Deadline()
	assert.False(t, has, "no deadline of real time")
	m.Advance(time.Second)
	assert.NoError(t, ctx.Err())
	m.Advance(time.Second)
	ended(t, ctx)
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
	ended(t, child)
	assert.ErrorIs(t, child.Err(), context.DeadlineExceeded, "a derived context ends with its error")
	assert.Zero(t, m.Waiting(), "its timer is gone")
}

func TestWithTimeoutEndsWithItsParentOrItsCancel(t *testing.T) {
	m := NewManual(start)
	cause := errors.New("the parent's cause")
	parent, cancelParent := context.WithCancelCause(t.Context())
	ctx, cancel := WithTimeout(parent, m, time.Second)
	defer cancel()
	stopped := make(chan struct{})
	context.AfterFunc(ctx, func() { close(stopped) })
	cancelParent(cause)
	ended(t, ctx)
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(ctx), cause)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	require.Eventually(t, func() bool { return m.Waiting() == 0 }, 10*time.Second, time.Millisecond, "its timer is stopped")

	ctx, cancel = WithTimeout(t.Context(), m, time.Second)
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	m.Advance(time.Hour)
	assert.ErrorIs(t, ctx.Err(), context.Canceled, "the first end wins")

	deadline, cancelDeadline := context.WithTimeout(t.Context(), time.Hour)
	defer cancelDeadline()
	ctx, cancel = WithTimeout(deadline, m, time.Second)
	defer cancel()
	want, _ := deadline.Deadline()
	got, ok := ctx.Deadline()
	assert.True(t, ok)
	assert.Equal(t, want, got, "the parent's deadline")
}

func TestWithTimeoutOfTheRealClockIsContextWithTimeout(t *testing.T) {
	ctx, cancel := WithTimeout(t.Context(), Real, time.Hour)
	defer cancel()
	d, ok := ctx.Deadline()
	assert.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(time.Hour), d, time.Minute)
}

// A jump of a Controlled clock past a context's timeout ends it at once.
func TestWithTimeoutFollowsAControlledClocksJump(t *testing.T) {
	c := NewControlled(NewManual(start))
	defer c.Close()
	ctx, cancel := WithTimeout(t.Context(), c, 30*time.Second)
	defer cancel()
	require.NoError(t, c.Set(Control{Offset: 29 * time.Second, Rate: 1}))
	assert.NoError(t, ctx.Err())
	require.NoError(t, c.Set(Control{Offset: 31 * time.Second, Rate: 1}))
	ended(t, ctx)
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
}

func TestAfterFuncAndStopOfOwnTimers(t *testing.T) {
	m := NewManual(start)
	ran := make(chan struct{})
	tm := m.AfterFunc(time.Second, func() { close(ran) })
	assert.Nil(t, tm.C())
	m.Advance(time.Second)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	assert.True(t, m.AfterFunc(time.Second, func() { t.Error("a stopped AfterFunc ran") }).Stop(), "active until stopped")

	// A value sent before a Stop or a Reset is not received after it.
	tk := m.NewTimer(time.Second)
	m.Advance(time.Second)
	tk.Reset(time.Second)
	assert.False(t, fired(tk.C()), "the value of the first firing is dropped")
	m.Advance(time.Second)
	assert.True(t, fired(tk.C()))
	m.Advance(time.Hour)
}

func TestSleepWaitsForTheClockOrTheContext(t *testing.T) {
	m := NewManual(start)
	done := make(chan error, 1)
	go func() { done <- Sleep(t.Context(), m, time.Minute) }()
	require.True(t, m.AwaitWaiting(1, 10*time.Second))
	m.Advance(time.Minute)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return once the clock passed its wait")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, Sleep(ctx, m, time.Minute), context.Canceled)
	assert.Zero(t, m.Waiting(), "its timer is stopped")
}
