package consumer

import "time"

// EvictSweep runs one eviction sweep with cutoff, as the eviction loop does
// on each tick, so that a test decides when it happens.
func (w *Worker) EvictSweep(cutoff time.Time) { w.evictSweep(cutoff, time.Minute) }

// Cut is cut, for tests.
var Cut = cut

// TakeAndAnswer records a report taken at t and answers the oldest, as
// the heartbeat path does, for the allocation test.
func (w *Worker) TakeAndAnswer(t time.Time) {
	w.waiting.taken(t)
	w.waiting.answered()
}
