package clock

import "time"

// Clock is the time a process reads.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	// NewTimer returns a timer that sends the time on C once d has passed.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that sends the time on C every d (d > 0),
	// dropping ticks for a slow receiver.
	NewTicker(d time.Duration) Ticker
	// After is NewTimer(d).C().
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f in its own goroutine once d has passed; the
	// Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a time.Timer of a Clock. As a time.Timer's since Go 1.23, no
// value sent before a Stop or a Reset is received after it.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was
	// active.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether it was
	// active.
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Stop()                 { t.t.Stop() }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }
