package consumer

import (
	"context"
	"time"
)

// fullCadence spaces the full updates on <prefix>.state by
// Config.FullInterval, while deltas and the aggregate key's writes keep
// the publisher's PublishInterval. It is guarded by Worker.pubMu, as
// publishState runs under it.
type fullCadence struct {
	last time.Time // when the last full update was published
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
	wait := w.cfg.FullInterval - time.Since(w.full.last)
	if wait <= 0 {
		return true
	}
	w.pub.after(wait)
	return false
}

// fullPublishedLocked notes a full update published now. The caller holds
// pubMu.
func (w *Worker) fullPublishedLocked() { w.full.last = time.Now() }
