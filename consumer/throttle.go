package consumer

import (
	"sync"
	"time"
)

// throttle lets at most max events through per window and counts the rest,
// so that a flood of bad messages cannot flood the log.
type throttle struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu         sync.Mutex // guards the fields below
	start      time.Time  // start of the current window
	n          int        // events let through in the current window
	suppressed int        // events held back since the last one let through
}

func newThrottle(max int, window time.Duration) *throttle {
	return &throttle{max: max, window: window, now: time.Now}
}

// allow reports whether an event may be logged and, if so, how many were
// held back before it.
func (t *throttle) allow() (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
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
