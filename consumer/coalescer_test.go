package consumer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/protocol"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCoalescerPublishesLeadingEdgeAtOnce checks that the first change after
// a quiet interval is published without waiting for the interval.
func TestCoalescerPublishesLeadingEdgeAtOnce(t *testing.T) {
	published := make(chan struct{}, 10)
	c := newCoalescer(time.Hour, clock.Real, func() { published <- struct{}{} })
	l := startLoop(c.run)
	defer l.stop()

	c.changed()
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("the leading edge was not published")
	}
}

// TestCoalescerPublishesTrailingEdgeOnStop checks that changes within an
// interval are published together once, and that the loop's stop
// publishes a pending change instead of losing it.
func TestCoalescerPublishesTrailingEdgeOnStop(t *testing.T) {
	var n atomic.Int32
	first := make(chan struct{}, 1)
	c := newCoalescer(time.Hour, clock.Real, func() {
		if n.Add(1) == 1 {
			first <- struct{}{}
		}
	})
	l := startLoop(c.run)

	c.changed()
	<-first
	for range 100 {
		c.changed()
	}
	l.stop()
	assert.Equal(t, int32(2), n.Load(), "one leading and one trailing publish")
}

// TestCoalescerPublishesTrailingEdgeAfterInterval checks that a change
// within an interval goes out at its end without any further change.
func TestCoalescerPublishesTrailingEdgeAfterInterval(t *testing.T) {
	published := make(chan struct{}, 10)
	c := newCoalescer(20*time.Millisecond, clock.Real, func() { published <- struct{}{} })
	l := startLoop(c.run)
	defer l.stop()

	c.changed()
	<-published
	c.changed() // within the interval: must come out at its end
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("the trailing edge was not published")
	}
}

// TestCoalescerWithZeroIntervalPublishesEveryChange checks that interval 0
// publishes synchronously on each change.
func TestCoalescerWithZeroIntervalPublishesEveryChange(t *testing.T) {
	n := 0
	c := newCoalescer(0, clock.Real, func() { n++ })
	l := startLoop(c.run)
	for range 5 {
		c.changed()
	}
	l.stop()
	require.Equal(t, 5, n)
}

// TestCoalescerPublishesWhenAskedAfterAWhile checks that after makes the
// loop publish once the time has passed, with no change signalled.
func TestCoalescerPublishesWhenAskedAfterAWhile(t *testing.T) {
	published := make(chan struct{}, 10)
	c := newCoalescer(time.Hour, clock.Real, func() { published <- struct{}{} })
	l := startLoop(c.run)
	c.after(10 * time.Millisecond)
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("the publish asked for was not made")
	}
	l.stop()
	assert.Empty(t, published, "one publish, none at the stop: nothing was pending")
}

func TestParseNodeTokenAcceptsOnlyCanonicalDecimal(t *testing.T) {
	for token, want := range map[string]bool{
		"0": true, "7": true, "18446744073709551615": true,
		"": false, "07": false, "+7": false, "-1": false, "7a": false, "18446744073709551616": false, " 7": false,
	} {
		_, ok := protocol.ParseNodeToken(token)
		assert.Equal(t, want, ok, "token %q", token)
	}
}

func TestWantsJSONOnlyForApplicationJSON(t *testing.T) {
	assert.True(t, wantsJSON("application/json"))
	assert.True(t, wantsJSON("application/json; charset=utf-8"))
	assert.False(t, wantsJSON(""))
	assert.False(t, wantsJSON("application/msgpack"))
	assert.False(t, wantsJSON("text/plain"))
}

// TestCoalescerWaitsAtMostAnIntervalAfterItsClockWentBack: a clock that
// reads before the last publish went back; the time passed is unknown, and
// the next publish waits one interval of the clock, not the jump too.
func TestCoalescerWaitsAtMostAnIntervalAfterItsClockWentBack(t *testing.T) {
	m := clock.NewManual(time.Unix(1_700_000_000, 0))
	published := make(chan struct{}, 10)
	c := newCoalescer(time.Second, m, func() { published <- struct{}{} })
	l := startLoop(c.run)
	defer l.stop()
	within := func(what string) {
		t.Helper()
		select {
		case <-published:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	c.changed()
	within("the leading edge was not published")
	m.Advance(-time.Minute)
	c.changed()
	require.True(t, m.AwaitWaiting(1, 10*time.Second), "the trailing publish is scheduled")
	m.Advance(time.Second)
	within("the trailing edge waits for the jump back too")

	assert.Equal(t, time.Second, untilNext(m, m.Now().Add(time.Minute), time.Second), "a last publish in the clock's future")
	assert.Equal(t, 400*time.Millisecond, untilNext(m, m.Now().Add(-600*time.Millisecond), time.Second))
	assert.Negative(t, untilNext(m, time.Time{}, time.Second), "never published: due")
}
