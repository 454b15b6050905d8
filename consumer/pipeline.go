package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/state"
)

// sharedIntake is the intake of a state that several workers share: the
// heartbeat goroutine decodes a report and gives it to the state (Submit,
// or Refuse for one that does not decode), which sends its write without
// waiting for the store; the state answers each report, in arrival order,
// once its write is stored and applied by this worker's watch, through
// the report's heartbeat (its Completion), from whichever goroutine found
// the outcome. Up to the state's window of reports wait for their
// answers; past that, Submit blocks intake, so that the subscription's
// pending limits apply.
type sharedIntake struct {
	w     *Worker
	state Shared
}

func (in sharedIntake) take(msg *nats.Msg, start time.Time) {
	w := in.w
	h := heartbeatPool.Get().(*heartbeat)
	*h = heartbeat{w: w, msg: msg, start: start}
	err := w.decode(h)
	if err == nil {
		err = in.state.Submit(w.ctx, h.rep, h)
	} else {
		err = in.state.Refuse(w.ctx, err, h)
	}
	if err != nil {
		// Shutdown gave up on the reports left while the window was full:
		// this one is dropped unanswered.
		*h = heartbeat{}
		heartbeatPool.Put(h)
		w.waiting.dropped()
		w.stats.droppedAtStop.Add(1)
	}
}

func (in sharedIntake) sync(ctx context.Context) error  { return in.state.Sync(ctx) }
func (in sharedIntake) flush(ctx context.Context) error { return in.state.Flush(ctx) }
func (in sharedIntake) loaded() bool                    { return in.state.Loaded() }
func (in sharedIntake) changed(state.MergeResult)       {}

// drain lets the state answer the reports it holds, within half of what
// ctx leaves; those still waiting then are answered at once as
// unavailable (shutting down).
func (in sharedIntake) drain(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Until(d)/2, errShuttingDown)
		defer cancel()
	}
	in.state.Drain(ctx)
}

// halfBudget fires once half of the time ctx leaves has passed; never
// without a deadline. Call stop when done.
func halfBudget(ctx context.Context) (budget <-chan time.Time, stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		return make(<-chan time.Time), func() {}
	}
	t := time.NewTimer(time.Until(d) / 2)
	return t.C, func() { t.Stop() }
}
