package clock

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Control is a Controlled clock's setting: Offset is the total of its
// jumps so far, Rate how fast it runs against the clock it follows.
type Control struct {
	Offset time.Duration
	Rate   float64
}

// The bounds of a Control.
const (
	MaxOffset = time.Hour
	MinRate   = 0.01
	MaxRate   = 100
)

// Validate checks that Offset is within MaxOffset either way and Rate
// within [MinRate, MaxRate].
func (c Control) Validate() error {
	if c.Offset > MaxOffset || c.Offset < -MaxOffset {
		return fmt.Errorf("clock: offset %v is past ±%v", c.Offset, MaxOffset)
	}
	if math.IsNaN(c.Rate) || c.Rate < MinRate || c.Rate > MaxRate {
		return fmt.Errorf("clock: rate %v is not within [%v, %v]", c.Rate, MinRate, MaxRate)
	}
	return nil
}

// ErrClosed is returned by Set on a closed Controlled clock.
var ErrClosed = errors.New("clock: closed")

// Controlled is a clock that follows another one (its base) with an
// offset that jumps and a rate that changes (Set). Its timers fire by its
// own reading: a jump forward fires those it passes at once, a jump back
// delays them, a rate of 2 makes them fire in half the base's time.
// Close stops its goroutine.
type Controlled struct {
	base Clock

	mu         sync.Mutex // guards the fields below
	baseAnchor time.Time  // the base's reading at the last Set
	anchor     time.Time  // this clock's reading then
	ctl        Control
	timers     schedule
	closed     bool

	wake chan struct{} // a Set or a change of timers (buffered)
	stop chan struct{}
	done chan struct{}
}

var _ Clock = (*Controlled)(nil)

// NewControlled returns a clock that reads what base reads, at rate 1,
// until Set.
func NewControlled(base Clock) *Controlled {
	now := base.Now()
	c := &Controlled{base: base, baseAnchor: now, anchor: now.Round(0), ctl: Control{Rate: 1},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// nowLocked is the clock's reading; c.mu is held.
func (c *Controlled) nowLocked() time.Time { return c.readingLocked(c.base.Now()) }

// readingLocked is the clock's reading when its base reads base; c.mu is
// held.
func (c *Controlled) readingLocked(base time.Time) time.Time {
	elapsed := base.Sub(c.baseAnchor)
	return c.anchor.Add(time.Duration(float64(elapsed) * c.ctl.Rate))
}

func (c *Controlled) locked(f func(s *schedule, now time.Time)) {
	c.mu.Lock()
	f(&c.timers, c.nowLocked())
	c.mu.Unlock()
	c.poke()
}

func (c *Controlled) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Now returns the clock's reading (without a monotonic reading).
func (c *Controlled) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

// Since returns Now() - t.
func (c *Controlled) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer returns a timer that fires once this clock reads d later.
func (c *Controlled) NewTimer(d time.Duration) Timer { return newOwnTimer(c, d, 0, nil) }

// NewTicker returns a ticker that fires every d of this clock.
func (c *Controlled) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return ownTicker{newOwnTimer(c, d, d, nil)}
}

// After is NewTimer(d).C().
func (c *Controlled) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// AfterFunc calls f in its own goroutine once this clock reads d later.
func (c *Controlled) AfterFunc(d time.Duration, f func()) Timer { return newOwnTimer(c, d, 0, f) }

// Control returns the setting in force.
func (c *Controlled) Control() Control {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctl
}

// Set puts ctl in force from now: the reading jumps by the change of
// Offset and then runs at Rate.
func (c *Controlled) Set(ctl Control) error {
	if err := ctl.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	now := c.nowLocked()
	c.baseAnchor = c.base.Now()
	c.anchor = now.Add(ctl.Offset - c.ctl.Offset)
	c.ctl = ctl
	c.timers.fire(c.anchor)
	c.mu.Unlock()
	c.poke()
	return nil
}

// Close stops the clock's goroutine; its timers fire no more.
func (c *Controlled) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
}

// baseSlack is how far the base may move while run sets its timer: past
// it (a manual base advanced meanwhile), the timer, set relative to the
// base's time then, would fire late by as much, and run looks again.
const baseSlack = time.Millisecond

// run fires the timers: it waits on the base clock until the earliest
// deadline, by this clock, would be reached, or until a Set or a change
// of timers.
func (c *Controlled) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		base := c.base.Now()
		now := c.readingLocked(base)
		c.timers.fire(now)
		next, ok := c.timers.next()
		rate := c.ctl.Rate
		c.mu.Unlock()
		var due <-chan time.Time
		var t Timer
		if ok {
			wait := time.Duration(math.Ceil(float64(next.Sub(now)) / rate))
			t = c.base.NewTimer(max(wait, 0))
			if c.base.Since(base) > baseSlack {
				t.Stop()
				continue
			}
			due = t.C()
		}
		select {
		case <-due:
		case <-c.wake:
		case <-c.stop:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-c.stop:
			return
		default:
		}
	}
}
