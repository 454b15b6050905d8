package clock

import (
	"sync"
	"time"
)

// Manual is a clock that moves only by Advance, for tests: its timers fire
// when it passes their deadline.
type Manual struct {
	mu      sync.Mutex // guards the fields below
	now     time.Time
	timers  schedule
	changed chan struct{} // closed and replaced when timers are added or removed
}

var _ Clock = (*Manual)(nil)

// NewManual returns a Manual clock that reads start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, changed: make(chan struct{})}
}

func (m *Manual) locked(f func(s *schedule, now time.Time)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.timers, m.now)
	close(m.changed)
	m.changed = make(chan struct{})
}

// Now returns the clock's reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Since returns Now() - t.
func (m *Manual) Since(t time.Time) time.Duration { return m.Now().Sub(t) }

// NewTimer returns a timer that fires once the clock has advanced by d.
func (m *Manual) NewTimer(d time.Duration) Timer { return newOwnTimer(m, d, 0, nil) }

// NewTicker returns a ticker that fires every d the clock advances.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return ownTicker{newOwnTimer(m, d, d, nil)}
}

// After is NewTimer(d).C().
func (m *Manual) After(d time.Duration) <-chan time.Time { return m.NewTimer(d).C() }

// AfterFunc calls f in its own goroutine once the clock has advanced by d.
func (m *Manual) AfterFunc(d time.Duration, f func()) Timer { return newOwnTimer(m, d, 0, f) }

// Advance moves the clock by d and fires the timers due.
func (m *Manual) Advance(d time.Duration) {
	m.locked(func(s *schedule, _ time.Time) {
		m.now = m.now.Add(d)
		s.fire(m.now)
	})
}

// Waiting returns how many timers and tickers are scheduled.
func (m *Manual) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// AwaitWaiting waits until at least n timers are scheduled, or timeout
// (real time) passes; it reports whether they are.
func (m *Manual) AwaitWaiting(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		k, changed := len(m.timers), m.changed
		m.mu.Unlock()
		if k >= n {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}
