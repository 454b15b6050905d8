package consumer

import (
	"fmt"
	"sync"
	"time"
)

// unanswered keeps the times at which the worker took the reports it has
// not answered yet, oldest first. Reports are answered in the order they
// were taken, in either mode (a local state answers each before it takes
// the next; a shared one answers in the order of Submit and Refuse), so
// the oldest unanswered report is the first of the queue: an answer
// removes the oldest time, and a report the state never took (dropped at
// shutdown) removes the newest. The queue is a ring that grows by doubling
// and never shrinks: a shared state's window bounds it, and once it holds
// that many, taking and answering a report allocate nothing.
type unanswered struct {
	mu    sync.Mutex
	times []time.Time // the ring; len is its capacity
	head  int         // index of the oldest
	n     int         // how many it holds
}

// initialUnanswered is the ring's first capacity: a local state holds one
// report at a time, a shared one up to its window (256 by default).
const initialUnanswered = 64

// taken records a report taken at t.
func (q *unanswered) taken(t time.Time) {
	q.mu.Lock()
	if q.n == len(q.times) {
		q.grow()
	}
	q.times[(q.head+q.n)%len(q.times)] = t
	q.n++
	q.mu.Unlock()
}

func (q *unanswered) grow() {
	next := make([]time.Time, max(2*len(q.times), initialUnanswered))
	for i := range q.n {
		next[i] = q.times[(q.head+i)%len(q.times)]
	}
	q.times, q.head = next, 0
}

// answered forgets the oldest report: it has been answered.
func (q *unanswered) answered() {
	q.mu.Lock()
	if q.n > 0 {
		q.head = (q.head + 1) % len(q.times)
		q.n--
	}
	q.mu.Unlock()
}

// dropped forgets the newest report: the state did not take it and will
// not answer it.
func (q *unanswered) dropped() {
	q.mu.Lock()
	if q.n > 0 {
		q.n--
	}
	q.mu.Unlock()
}

// oldest returns when the oldest unanswered report was taken, and how many
// wait; the zero time if none.
func (q *unanswered) oldest() (time.Time, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return time.Time{}, 0
	}
	return q.times[q.head], q.n
}

// OldestUnanswered returns how long the oldest report the worker took and
// has not answered yet has waited, on the worker's clock (Config.Clock),
// and how many reports wait; 0 and 0 if every report taken is answered.
// Reports that still wait in the subscription, not taken yet, are not
// counted: a worker whose answers stall stops taking them once its state's
// window is full, and its oldest report keeps ageing.
func (w *Worker) OldestUnanswered() (age time.Duration, waiting int) {
	t, n := w.waiting.oldest()
	if n == 0 {
		return 0, 0
	}
	return max(w.cfg.Clock.Since(t), 0), n
}

// answersStalled returns why the worker is not ready if a report has
// waited for its answer longer than Config.UnansweredLimit, or nil.
func (w *Worker) answersStalled() error {
	age, n := w.OldestUnanswered()
	if age <= w.cfg.UnansweredLimit {
		return nil
	}
	return fmt.Errorf("reports are not answered: the oldest of %d waiting has waited %v, past the %v limit (the state does not answer; a restart may be needed)",
		n, age.Round(time.Millisecond), w.cfg.UnansweredLimit)
}
