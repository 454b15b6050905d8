package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"
)

// The clock faults of package lease's rules ("Clocks"): a jump or a rate
// of one holder's clock may leave the lease without a holder for a while,
// or two holders deeming it theirs for a while, but a write fenced on the
// lease is never stored from a holder that lost it.

// fencedWrite is a write of the aggregate key fenced on h's lease.
func fencedWrite(t *testing.T, g *group, h *holder) error {
	return h.WithFence(t.Context(), func(ctx context.Context, fence, _ uint64) error {
		_, err := g.store.PutIf(ctx, "__flow/state", []byte("{}"), kv.Condition{Key: key, Revision: fence})
		return err
	})
}

func TestLeaseOfAHolderWhoseClockJumpsForwardExpiresUntilItsNextRenewal(t *testing.T) {
	g := newGroup(t, "a")
	a := g.holders["a"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	a.clock.Advance(time.Minute)
	_, ok := a.Held()
	assert.False(t, ok, "60 s passed by its clock since its renewal")
	assert.ErrorIs(t, fencedWrite(t, g, a), lease.ErrNotHeld)
	assert.Zero(t, a.Tick(t.Context()), "a renewal, not a takeover")
	_, ok = a.Held()
	assert.True(t, ok, "held again from its renewal")
	assert.NoError(t, fencedWrite(t, g, a))
}

// A holder whose clock jumps back cannot tell how long ago it renewed: it
// stops deeming the lease its own at once (not for the jump and 2/3 of the
// TTL), and only a successful renewal gives it back.
func TestLeaseOfAHolderWhoseClockJumpsBackIsNotHeldUntilItRenews(t *testing.T) {
	g := newGroup(t, "a", "b")
	a, b := g.holders["a"], g.holders["b"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	a.clock.Advance(-time.Minute)
	_, ok := a.Held()
	assert.False(t, ok, "its renewal is 60 s in its clock's future")
	assert.ErrorIs(t, fencedWrite(t, g, a), lease.ErrNotHeld)

	// Its ticker waits for the jump, so it does not renew: b takes over a
	// TTL after the last renewal it saw, and a never deemed the lease its
	// own meanwhile.
	a.clock.Advance(ttl)
	b.clock.Advance(ttl)
	assert.Empty(t, g.holding())
	require.NotZero(t, b.Tick(t.Context()))
	g.deliver()
	assert.Equal(t, []string{"b"}, g.holding())
	a.clock.Advance(time.Minute)
	assert.Zero(t, a.Tick(t.Context()), "its renewal finds b's takeover")
	assert.Equal(t, []string{"b"}, g.holding())

	// Had nobody taken over, its next renewal gives it back.
	b.clock.Advance(-time.Minute)
	assert.Empty(t, g.holding())
	assert.Zero(t, b.Tick(t.Context()), "a renewal")
	assert.Equal(t, []string{"b"}, g.holding())
}

// A holder that waits for another's silence measures it again from now when
// its clock went back: it takes over a TTL after that, not a TTL after the
// silence began plus the jump.
func TestLeaseTakeoverByAHolderWhoseClockJumpsBackWaitsOneTTL(t *testing.T) {
	g := newGroup(t, "a", "b")
	a, b := g.holders["a"], g.holders["b"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	// a dies. b's clock jumps back a minute.
	b.clock.Advance(-time.Minute)
	assert.Zero(t, b.Tick(t.Context()))
	b.clock.Advance(ttl - time.Millisecond)
	assert.Zero(t, b.Tick(t.Context()))
	b.clock.Advance(time.Millisecond)
	assert.NotZero(t, b.Tick(t.Context()), "a TTL of its clock after it saw the jump")
}

// rates runs holder a, which holds the lease, and b, which waits, with
// clocks at the given rates, in steps of 10 ms of real time: a renews
// every Interval of its clock until it is cut from the store at cut, b
// ticks every Interval of its clock and sees every write at once. It
// returns the real time at which b took over, and whether a deemed the
// lease its own at once with b meanwhile, with a's fenced write then.
func rates(t *testing.T, rateA, rateB float64, cut time.Duration) (took time.Duration, both bool, bothWrite error) {
	g := newGroup(t, "a", "b")
	a, b := g.holders["a"], g.holders["b"]
	require.NotZero(t, a.Tick(t.Context()))
	g.deliver()
	const step = 10 * time.Millisecond
	var sinceA, sinceB time.Duration // each one's clock since its last tick
	for now := step; now < time.Minute; now += step {
		da, db := time.Duration(rateA*float64(step)), time.Duration(rateB*float64(step))
		a.clock.Advance(da)
		b.clock.Advance(db)
		if sinceA += da; sinceA >= a.Interval() && now < cut {
			sinceA = 0
			a.Tick(t.Context())
			g.deliver()
		}
		if sinceB += db; sinceB >= b.Interval() {
			sinceB = 0
			if b.Tick(t.Context()) != 0 {
				took = now
				g.deliver()
			}
		}
		if len(g.holding()) == 2 && !both {
			both, bothWrite = true, fencedWrite(t, g, a)
		}
		if took != 0 && now > took+ttl {
			return took, both, bothWrite
		}
	}
	t.Fatalf("b did not take over within a minute (rates %v, %v)", rateA, rateB)
	return
}

// While b's clock runs at most 1.5 times as fast as a's, one holder at a
// time deems the lease its own; at x0.5 on the holder or x2 on the other,
// both may for a while once the holder is cut from the store, and the
// holder's fenced write is refused then. Renewals keep the lease with
// the holder whatever the rates, while they are stored.
func TestLeaseUnderClocksOfDifferentRates(t *testing.T) {
	const cut = 10 * time.Second
	for _, c := range []struct {
		a, b float64
		both bool
	}{{1, 1, false}, {1, 1.5, false}, {0.75, 1, false}, {2, 1, false}, {1, 0.5, false}, {0.5, 1, true}, {1, 2, true}} {
		t.Run(fmt.Sprintf("a x%v b x%v", c.a, c.b), func(t *testing.T) {
			took, both, err := rates(t, c.a, c.b, cut)
			assert.GreaterOrEqual(t, took, cut, "no takeover while a renews")
			assert.Equal(t, c.both, both, "two holders deem the lease theirs")
			if both {
				assert.ErrorIs(t, err, lease.ErrNotHeld, "the lost holder's fenced write is refused")
			}
		})
	}
}
