package throttle

import (
	"sync"
	"time"
)

// Throttle lets at most max events through per window and counts the rest.
// It is safe for concurrent use.
type Throttle struct {
	max    int
	window time.Duration
	// Now is the clock; tests replace it before the first Allow.
	Now func() time.Time

	mu         sync.Mutex // guards the fields below
	start      time.Time  // start of the current window
	n          int        // events let through in the current window
	suppressed int        // events held back since the last one let through
}

// New returns a Throttle that lets max events through per window, on the
// wall clock.
func New(max int, window time.Duration) *Throttle {
	return &Throttle{max: max, window: window, Now: time.Now}
}

// Allow reports whether an event may be logged and, if so, how many were
// held back before it.
func (t *Throttle) Allow() (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.Now()
	if now.Sub(t.start) >= t.window {
		t.start, t.n = now, 0
	}
	if t.n >= t.max {
		t.suppressed++
		return false, 0
	}
	t.n++
	suppressed, t.suppressed = t.suppressed, 0
	return true, suppressed
}
