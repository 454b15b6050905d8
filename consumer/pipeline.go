package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// inflight is a report between intake and its answer.
type inflight struct {
	msg          *nats.Msg
	node         uint64
	hasNode      bool
	nodeEpoch    uint64
	hasNodeEpoch bool
	start        time.Time
	pending      *state.Pending // nil if err is set
	err          error          // refused before its write
}

// pipeline is the completion stage: it answers the reports in arrival
// order, each once its write is stored and applied by this worker's watch
// (or failed). Its queue holds Window reports: a full queue blocks intake,
// so that the subscription's pending limits apply.
type pipeline struct {
	state Shared
	queue chan inflight
	stop  chan struct{} // closed by Shutdown once intake has stopped
	done  chan struct{} // closed when run returns
}

func newPipeline(state Shared) *pipeline {
	return &pipeline{state: state, queue: make(chan inflight, max(state.Window(), 1)), stop: make(chan struct{}), done: make(chan struct{})}
}

// submit is handleHeartbeat's path for a pipelined state: it decodes,
// checks and submits the report, and queues it for its answer.
func (w *Worker) submit(msg *nats.Msg, start time.Time) {
	it := inflight{msg: msg, start: start}
	var report []flowstate.Flow
	it.node, it.hasNode, report, it.err = w.decodeReport(msg)
	if it.err == nil {
		it.nodeEpoch, it.hasNodeEpoch = w.report.NodeEpoch, w.report.HasNodeEpoch
		it.pending, it.err = w.pipe.state.Submit(w.ctx, w.report.NodeID, report)
	}
	select {
	case w.pipe.queue <- it:
	case <-w.ctx.Done():
		// Shutdown gave up on the reports left: this one is dropped
		// unanswered, and its write, if sent, is the node's last.
		if it.pending != nil {
			it.pending.Release()
		}
		w.stats.droppedAtStop.Add(1)
	}
}

// runPipeline answers the queued reports until Shutdown has stopped intake
// and the queue is empty.
func (w *Worker) runPipeline() {
	p := w.pipe
	defer close(p.done)
	for {
		select {
		case it := <-p.queue:
			w.complete(it)
		case <-p.stop:
			for {
				select {
				case it := <-p.queue:
					w.complete(it)
				default:
					return
				}
			}
		}
	}
}

// complete waits for a report's write and answers it.
func (w *Worker) complete(it inflight) {
	var res state.MergeResult
	err := it.err
	if it.pending != nil {
		res, err = it.pending.Wait(w.ctx)
		it.pending.Release()
	}
	w.answer(it.msg, it.node, it.hasNode, it.nodeEpoch, it.hasNodeEpoch, it.start, res, err)
}

// stopPipeline lets the completion stage answer what is queued, within
// half of what ctx leaves; then the handlers' context ends, and what is
// left is answered at once as unavailable.
func (w *Worker) stopPipeline(ctx context.Context) {
	if w.pipe == nil {
		return
	}
	close(w.pipe.stop)
	budget, stop := halfBudget(ctx)
	defer stop()
	select {
	case <-w.pipe.done:
		return
	case <-budget:
	case <-ctx.Done():
	}
	w.cancel()
	<-w.pipe.done // every wait ends with the handlers' context
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
