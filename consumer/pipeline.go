package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/state"
)

// The intake pipeline of a shared state (Shared): the heartbeat goroutine
// decodes a report and gives it to the state (Submit, or Refuse for one
// that does not decode), which sends its write without waiting for the
// store; the state answers each report, in arrival order, once its write is
// stored and applied by this worker's watch, through the report's
// Completion (inflight), from whichever goroutine found the outcome. Up to
// Window reports wait for their answers; past that, Submit blocks intake,
// so that the subscription's pending limits apply.

// inflight is a report between intake and its answer: the state's
// Completion of it.
type inflight struct {
	w            *Worker
	msg          *nats.Msg
	node         uint64
	hasNode      bool
	nodeEpoch    uint64
	hasNodeEpoch bool
	start        time.Time
}

var inflightPool = sync.Pool{New: func() any { return new(inflight) }}

// Complete answers the report: the state's answer to it.
func (it *inflight) Complete(res state.MergeResult, err error) {
	it.w.answer(it.msg, it.node, it.hasNode, it.nodeEpoch, it.hasNodeEpoch, it.start, res, err)
	*it = inflight{}
	inflightPool.Put(it)
}

var _ state.Completion = (*inflight)(nil)

// submit is handleHeartbeat's path for a shared state: it decodes and
// checks the report, and gives it to the state, which answers it in its
// turn.
func (w *Worker) submit(msg *nats.Msg, start time.Time) {
	it := inflightPool.Get().(*inflight)
	it.w, it.msg, it.start = w, msg, start
	node, hasNode, report, err := w.decodeReport(msg)
	it.node, it.hasNode = node, hasNode
	if err == nil {
		it.nodeEpoch, it.hasNodeEpoch = w.report.NodeEpoch, w.report.HasNodeEpoch
		err = w.shared.Submit(w.ctx, w.report.NodeID, report, it)
	} else {
		err = w.shared.Refuse(w.ctx, err, it)
	}
	if err != nil {
		// Shutdown gave up on the reports left while the window was full:
		// this one is dropped unanswered.
		*it = inflight{}
		inflightPool.Put(it)
		w.stats.droppedAtStop.Add(1)
	}
}

// stopPipeline lets the state answer the reports it holds, within half of
// what ctx leaves; those still waiting then are answered at once as
// unavailable (shutting down).
func (w *Worker) stopPipeline(ctx context.Context) {
	if w.shared == nil {
		return
	}
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Until(d)/2, errShuttingDown)
		defer cancel()
	}
	w.shared.Drain(ctx)
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
