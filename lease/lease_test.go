package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"
)

// These tests drive leases by hand: a manual clock per holder, Tick called
// by the test, and the test itself playing the store's watch (it hands
// each write of the key to every holder's Observe). Nothing sleeps.

const (
	key = "__flow/publisher"
	ttl = 3 * time.Second
)

// group is a store and the holders of one lease on it.
type group struct {
	t       *testing.T
	store   *kv.SharedMemory
	epoch   string
	holders map[string]*holder
}

type holder struct {
	*lease.Lease
	clock *clock.Manual
}

func newGroup(t *testing.T, ids ...string) *group {
	store := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	epoch, err := store.Epoch(t.Context())
	require.NoError(t, err)
	g := &group{t: t, store: store, epoch: epoch, holders: map[string]*holder{}}
	for _, id := range ids {
		c := clock.NewManual(time.Unix(1_700_000_000, 0))
		l, err := lease.New(store, lease.Config{Key: key, ID: id, TTL: ttl, Clock: c})
		require.NoError(t, err)
		g.holders[id] = &holder{Lease: l, clock: c}
		l.Observe(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: epoch}})
		free, _ := l.Observe(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: epoch}, Exact: true})
		assert.True(t, free, "a holder tries at once when it is ready")
	}
	return g
}

// deliver plays the watch: the key's last write goes to every holder. It
// returns the holders for whom the write was their takeover.
func (g *group) deliver() map[string]bool {
	e, err := g.store.Get(g.t.Context(), key)
	ev := kv.Event{Op: kv.OpPut, Key: key, Value: e.Value, Revision: kv.Revision{Epoch: g.epoch, Seq: e.Revision}, Exact: true}
	if errors.Is(err, kv.ErrNotFound) {
		last, err := g.store.LastRevision(g.t.Context())
		require.NoError(g.t, err)
		ev = kv.Event{Op: kv.OpDelete, Key: key, Revision: last, Exact: true}
	} else {
		require.NoError(g.t, err)
	}
	applied := map[string]bool{}
	for id, h := range g.holders {
		_, a := h.Observe(ev)
		applied[id] = a
	}
	return applied
}

// holding returns the ids that deem themselves the holder.
func (g *group) holding() []string {
	var ids []string
	for id, h := range g.holders {
		if _, ok := h.Held(); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

func TestLeaseExactlyOneTakesAFreeLease(t *testing.T) {
	g := newGroup(t, "a", "b")
	ctx := t.Context()
	rev := g.holders["a"].Tick(ctx)
	require.NotZero(t, rev, "a takes the free lease")
	assert.Zero(t, g.holders["b"].Tick(ctx), "b's takeover, on the revision it saw, loses")
	assert.Equal(t, []string{"a"}, g.holding())
	applied := g.deliver()
	assert.True(t, applied["a"], "a's own takeover came back through the watch")
	assert.False(t, applied["b"])
	acquired, ok := g.holders["a"].Held()
	assert.True(t, ok)
	assert.Equal(t, rev, acquired)

	// b sees a renewed lease: it does not even try.
	last, err := g.store.LastRevision(ctx)
	require.NoError(t, err)
	assert.Zero(t, g.holders["b"].Tick(ctx))
	now, err := g.store.LastRevision(ctx)
	require.NoError(t, err)
	assert.Equal(t, last, now, "no write from a holder that sees the lease held")
}

func TestLeaseRenewalKeepsItValidForTwoThirdsOfTheTTL(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	for range 5 {
		a.clock.Advance(a.Interval())
		assert.Zero(t, a.Tick(t.Context()), "a renewal is not a takeover")
		g.deliver()
		_, ok := a.Held()
		assert.True(t, ok)
	}
	// No renewal: valid until 2/3 TTL after the last one was sent.
	a.clock.Advance(ttl*2/3 - time.Millisecond)
	_, ok := a.Held()
	assert.True(t, ok)
	a.clock.Advance(time.Millisecond)
	_, ok = a.Held()
	assert.False(t, ok, "expired before anyone may take over")
}

func TestLeaseTakenOverAfterATTLOfSilence(t *testing.T) {
	g := newGroup(t, "a", "b")
	a, b := g.holders["a"], g.holders["b"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()

	// a dies: no more renewals. b waits a TTL from the last write it saw.
	b.clock.Advance(ttl - time.Millisecond)
	assert.Zero(t, b.Tick(t.Context()))
	b.clock.Advance(time.Millisecond)
	rev := b.Tick(t.Context())
	require.NotZero(t, rev, "b takes over after a TTL of silence")
	applied := g.deliver()
	assert.True(t, applied["b"])

	// a comes back, its clock stopped (it still deems itself the holder):
	// its fenced write is refused, and it gives up the lease; so does its
	// renewal.
	_, ok := a.Held()
	require.True(t, ok, "a's clock did not move")
	called := false
	err := a.WithFence(t.Context(), func(_ context.Context, fence, _ uint64) error {
		called = true
		_, err := g.store.PutIf(t.Context(), "__flow/state", []byte("{}"), kv.Condition{Key: key, Revision: fence})
		return err
	})
	assert.True(t, called)
	assert.ErrorIs(t, err, lease.ErrNotHeld)
	assert.Equal(t, []string{"b"}, g.holding())
	assert.Zero(t, a.Tick(t.Context()), "a sees b's lease, renewed just now")

	// The holder's fenced write goes through.
	err = b.WithFence(t.Context(), func(_ context.Context, fence, acquired uint64) error {
		assert.Equal(t, rev, acquired)
		_, err := g.store.PutIf(t.Context(), "__flow/state", []byte("{}"), kv.Condition{Key: key, Revision: fence})
		return err
	})
	assert.NoError(t, err)
}

func TestLeaseReleasedIsTakenAtOnce(t *testing.T) {
	g := newGroup(t, "a", "b")
	a, b := g.holders["a"], g.holders["b"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	require.NoError(t, a.Release(t.Context()))
	_, ok := a.Held()
	assert.False(t, ok)
	free, _ := b.Observe(deletion(t, g))
	assert.True(t, free, "a deletion frees the lease")
	assert.NotZero(t, b.Tick(t.Context()), "taken without waiting for a TTL")
	assert.NoError(t, a.Release(t.Context()), "releasing a lease not held does nothing")
}

// deletion is the watch's event of the key's deletion.
func deletion(t *testing.T, g *group) kv.Event {
	last, err := g.store.LastRevision(t.Context())
	require.NoError(t, err)
	return kv.Event{Op: kv.OpDelete, Key: key, Revision: last, Exact: true}
}

func TestLeaseEndsWithItsEpoch(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	require.NoError(t, g.store.Clear(t.Context()))
	epoch, err := g.store.Epoch(t.Context())
	require.NoError(t, err)
	a.Observe(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: epoch}})
	_, ok := a.Held()
	assert.False(t, ok, "a new epoch starts without a holder")
	assert.Zero(t, a.Tick(t.Context()), "not before the watch has read the new epoch")
	a.Observe(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: epoch}, Exact: true})
	assert.NotZero(t, a.Tick(t.Context()), "taken again in the new epoch")
}

func TestLeaseRunReleasesOnStop(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	ctx, cancel := context.WithCancel(t.Context())
	took := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx, nil, func(rev uint64) { took <- rev })
	}()
	<-took
	cancel()
	<-done
	_, err := g.store.Get(t.Context(), key)
	assert.ErrorIs(t, err, kv.ErrNotFound, "released")
}

// TestLeaseTakeoverSkippedByTheWatchIsStillApplied: a watch that fell
// behind delivers the renewal that replaced the takeover; it tells the
// holder once that its takeover is applied.
func TestLeaseTakeoverSkippedByTheWatchIsStillApplied(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	require.NotZero(t, a.Tick(t.Context()))
	a.clock.Advance(a.Interval())
	require.Zero(t, a.Tick(t.Context()), "a renewal")
	applied := g.deliver()
	assert.True(t, applied["a"], "the renewal's event stands for the takeover")
	applied = g.deliver()
	assert.False(t, applied["a"], "once")
}

// TestLeaseFencedWriteEndsBeforeTheLeaseLapses: a fenced write that the
// store does not answer holds up the holder's renewals; it must end (its
// context) while the lease is still valid, so that the renewal after it
// keeps the lease, however long the caller would have waited. A renewal
// due when the write starts is made first.
func TestLeaseFencedWriteEndsBeforeTheLeaseLapses(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	a.clock.Advance(a.Interval()) // a renewal is due: WithFence makes it
	before, err := g.store.LastRevision(t.Context())
	require.NoError(t, err)

	parent, cancel := context.WithCancel(t.Context())
	defer cancel()
	entered := make(chan uint64)
	var heldAtEnd bool
	done := make(chan error, 1)
	go func() {
		done <- a.WithFence(parent, func(ctx context.Context, fence, _ uint64) error {
			entered <- fence
			<-ctx.Done() // the store never answers
			_, heldAtEnd = a.Held()
			return ctx.Err()
		})
	}()
	fence := <-entered
	assert.Greater(t, fence, before.Seq, "the due renewal was made before the write")
	require.Equal(t, 1, a.clock.Waiting(), "the write's bound is the one timer of the holder's clock")
	fired := false
	for range 4 * int(ttl/(a.Interval()/4)) {
		a.clock.Advance(a.Interval() / 4)
		if fired = a.clock.Waiting() == 0; fired {
			break
		}
	}
	if !fired {
		cancel() // two TTLs of the holder's clock passed: the caller gives up
	}
	var ended error
	select {
	case ended = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WithFence did not return")
	}
	require.ErrorIs(t, ended, context.DeadlineExceeded, "the write ended by the lease's bound, not the caller's")
	assert.True(t, heldAtEnd, "the lease was still valid when the write gave up")
	assert.Zero(t, a.Tick(t.Context()), "the renewal after it is not a takeover")
	_, ok := a.Held()
	assert.True(t, ok, "renewed")
}
