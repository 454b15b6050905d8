package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/state"
)

// intake is how the reports reach the state, and what else depends on the
// mode: one type per mode (localIntake, sharedIntake), chosen by New or
// NewShared, so that the Worker never asks which mode it is in.
type intake interface {
	// take decodes the report in msg, which arrived at start, and gives it
	// to the state; the report is answered now or later, once.
	take(msg *nats.Msg, start time.Time)
	// sync is a get's read barrier: it returns once the state holds every
	// report any worker acknowledged before the call.
	sync(ctx context.Context) error
	// flush writes the aggregate key before a publish; state.ErrNotPublisher
	// means that another worker publishes, and this one publishes nothing.
	flush(ctx context.Context) error
	// loaded reports whether the state has read its store's content.
	loaded() bool
	// drain lets the state answer the reports it holds, until ctx ends.
	drain(ctx context.Context)
	// changed tells the publisher of what a call of this worker changed in
	// the state (a report, an eviction): a shared state signals every
	// change itself (Shared.Changes).
	changed(res state.MergeResult)
}

// heartbeat is one report from its arrival to its answer, in either mode:
// what the answer needs of it (the message, the node, when it arrived) and
// the report as the state takes it. A shared state answers it later, from
// another goroutine: it is the report's state.Completion.
type heartbeat struct {
	w     *Worker
	msg   *nats.Msg
	start time.Time // for Config.OnApplied; zero without it
	// node is the subject's node once known (hasNode): a report that does
	// not decode is still counted and logged by its node.
	node    uint64
	hasNode bool
	// rep is the decoded report; its flows are the decoder's, valid until
	// the next report is decoded (the state does not retain them).
	rep state.Report
}

// Complete answers the report: the state's answer to it.
func (h *heartbeat) Complete(res state.MergeResult, err error) {
	h.w.answer(h, res, err)
	*h = heartbeat{}
	heartbeatPool.Put(h)
}

// heartbeatPool keeps the heartbeats that a shared state answers later.
var heartbeatPool = sync.Pool{New: func() any { return new(heartbeat) }}

var _ state.Completion = (*heartbeat)(nil)

// localIntake is the intake of a state this worker alone holds: the
// heartbeat goroutine applies each report before it takes the next, and
// acks it once it is applied.
type localIntake struct {
	w     *Worker
	state Local
	h     *heartbeat // the report being applied: one at a time, on the heartbeat goroutine
}

func (in localIntake) take(msg *nats.Msg, start time.Time) {
	h := in.h
	*h = heartbeat{w: in.w, msg: msg, start: start}
	var res state.MergeResult
	err := in.w.decode(h)
	if err == nil {
		res, err = in.state.Merge(in.w.ctx, h.rep)
	}
	in.w.answer(h, res, err)
	in.changed(res)
}

func (in localIntake) changed(res state.MergeResult) {
	if res.Changed {
		in.w.pub.changed()
	}
}

// sync passes at once: the state is this worker's own, so it holds every
// report this worker acknowledged, and no other worker acknowledges any.
func (localIntake) sync(context.Context) error  { return nil }
func (localIntake) flush(context.Context) error { return nil }
func (localIntake) loaded() bool                { return true }
func (localIntake) drain(context.Context)       {}
