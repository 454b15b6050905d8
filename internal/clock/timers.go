package clock

import (
	"container/heap"
	"time"
)

// timer is a timer or ticker of a clock that keeps its own schedule
// (Manual, Controlled), fired by the clock under its lock.
type timer struct {
	ch     chan time.Time // nil for an AfterFunc's
	fn     func()         // an AfterFunc's, run in a goroutine of its own
	when   time.Time
	period time.Duration // a ticker's; 0 for a timer
	index  int           // in the schedule; -1 when not scheduled
}

// schedule is the timers of a clock, earliest first.
type schedule []*timer

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].when.Before(s[j].when) }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].index, s[j].index = i, j
}
func (s *schedule) Push(x any) {
	t := x.(*timer)
	t.index = len(*s)
	*s = append(*s, t)
}
func (s *schedule) Pop() any {
	old := *s
	t := old[len(old)-1]
	*s, t.index = old[:len(old)-1], -1
	return t
}

// add schedules t at when.
func (s *schedule) add(t *timer, when time.Time) {
	t.when = when
	heap.Push(s, t)
}

// remove unschedules t; it reports whether t was scheduled.
func (s *schedule) remove(t *timer) bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(s, t.index)
	return true
}

// fire sends now to every timer due at now (a timer once; a ticker once,
// rescheduled at its next tick after now), without blocking: as a
// time.Timer's channel, C holds one value.
func (s *schedule) fire(now time.Time) {
	for len(*s) > 0 && !(*s)[0].when.After(now) {
		t := heap.Pop(s).(*timer)
		if t.fn != nil {
			go t.fn()
			continue
		}
		select {
		case t.ch <- now:
		default:
		}
		if t.period > 0 {
			next := t.when.Add(t.period)
			if !next.After(now) {
				next = next.Add(now.Sub(next).Truncate(t.period) + t.period)
			}
			s.add(t, next)
		}
	}
}

// next returns the earliest deadline, if any.
func (s schedule) next() (time.Time, bool) {
	if len(s) == 0 {
		return time.Time{}, false
	}
	return s[0].when, true
}

// ownTimer is a Timer or Ticker of a clock with a schedule.
type ownTimer struct {
	t     *timer
	clock scheduler
}

// scheduler is a clock that keeps a schedule under its lock.
type scheduler interface {
	// locked runs f with the clock's schedule and reading, under its lock,
	// and wakes whoever waits for its next deadline.
	locked(f func(s *schedule, now time.Time))
}

func (o ownTimer) C() <-chan time.Time { return o.t.ch }

func (o ownTimer) Stop() bool {
	var was bool
	o.clock.locked(func(s *schedule, _ time.Time) {
		was = s.remove(o.t)
		o.t.drain()
	})
	return was
}

func (o ownTimer) Reset(d time.Duration) bool {
	var was bool
	o.clock.locked(func(s *schedule, now time.Time) {
		was = s.remove(o.t)
		o.t.drain()
		if o.t.period > 0 {
			o.t.period = d
		}
		s.add(o.t, now.Add(d))
		s.fire(now)
	})
	return was
}

// drain drops a value sent before a Stop or a Reset; the clock's lock is
// held, so none is being sent.
func (t *timer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

type ownTicker struct{ ownTimer }

func (o ownTicker) Stop()                 { o.ownTimer.Stop() }
func (o ownTicker) Reset(d time.Duration) { o.ownTimer.Reset(d) }

// newOwnTimer schedules a timer (period 0) or ticker on c; with fn, an
// AfterFunc's timer.
func newOwnTimer(c scheduler, d, period time.Duration, fn func()) ownTimer {
	if period < 0 || (period == 0 && d < 0) {
		d = 0
	}
	t := &timer{period: period, index: -1, fn: fn}
	if fn == nil {
		t.ch = make(chan time.Time, 1)
	}
	c.locked(func(s *schedule, now time.Time) {
		s.add(t, now.Add(d))
		s.fire(now)
	})
	return ownTimer{t: t, clock: c}
}
