package consumer

import (
	"context"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// fullCadence spaces the full updates on <prefix>.state by
// Config.FullInterval, while deltas and the aggregate key's writes keep
// the publisher's PublishInterval. It is guarded by Worker.pubMu, as
// publishState runs under it.
type fullCadence struct {
	last time.Time // when the last full update was published, by the worker's clock
}

// fullDueLocked reports whether a full update may go out now: always when
// Config.FullInterval is no longer than PublishInterval (a full update with
// every publish), and while the worker shuts down (its last state goes out
// in full); otherwise once FullInterval has passed since the last one. When
// it is not due yet, the publisher is asked to publish then (after), so
// that a change is sent in full even if no other change follows it. It is not due while
// the state is the one last sent in full. The caller holds pubMu.
func (w *Worker) fullDueLocked(ctx context.Context) bool {
	if w.cfg.FullInterval <= w.cfg.PublishInterval || w.stopped.Load() {
		return true
	}
	if v, err := w.mgr.Version(ctx); err == nil && v == w.lastPublished {
		return false
	}
	wait := untilNext(w.cfg.Clock, w.full.last, w.cfg.FullInterval)
	if wait <= 0 {
		return true
	}
	w.pub.after(wait)
	return false
}

// fullPublishedLocked notes a full update published now. The caller holds
// pubMu.
func (w *Worker) fullPublishedLocked() { w.full.last = w.cfg.Clock.Now() }

// untilNext is how long until interval has passed since last, by clk: at
// most interval, also when clk went back since last (then it reads before
// last, and the time passed is unknown).
func untilNext(clk clock.Clock, last time.Time, interval time.Duration) time.Duration {
	return min(interval-clk.Since(last), interval)
}
