package consumer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// handleHeartbeat applies one report. The client library calls it from one
// goroutine, in arrival order. With a pipelined state it only submits the
// report: the completion stage answers it (pipeline.go).
func (w *Worker) handleHeartbeat(msg *nats.Msg) {
	w.stats.received.Add(1)
	if w.dropping.Load() {
		// Shutdown's apply budget is spent: drop unanswered; the node's
		// next heartbeat heals the state.
		w.stats.droppedAtStop.Add(1)
		return
	}
	var start time.Time
	if w.cfg.OnApplied != nil {
		start = monoNow()
	}
	if w.shared != nil {
		w.submit(msg, start)
		return
	}
	node, hasNode, flows, err := w.decodeReport(msg)
	var res state.MergeResult
	if err == nil {
		res, err = w.local.MergeFlows(w.ctx, w.report.NodeID, flows)
	}
	w.answer(msg, node, hasNode, w.report.NodeEpoch, w.report.HasNodeEpoch, start, res, err)
}

// answer acknowledges a report applied, or answers why it was not.
func (w *Worker) answer(msg *nats.Msg, node uint64, hasNode bool, nodeEpoch uint64, hasNodeEpoch bool,
	start time.Time, res state.MergeResult, err error) {
	if err != nil {
		v := w.failReport(msg, node, hasNode, err)
		w.deadLetter(msg, v)
		return
	}
	w.stats.applied.Add(1)
	if w.cfg.OnApplied != nil {
		w.cfg.OnApplied(appliedSince(start, res))
	}
	w.noteNodeEpoch(node, nodeEpoch, hasNodeEpoch)
	if msg.Reply != "" {
		if err := msg.RespondMsg(&nats.Msg{Header: versionHeader(chaosAck(res).Version)}); err != nil {
			w.logThrottled(slog.LevelWarn, "ack failed", slog.String("subject", cutToken(msg.Subject)),
				slog.Uint64("node_id", node), slog.Any("err", err))
		} else {
			w.stats.acked.Add(1)
		}
	}
	w.localChanged(res)
}

// localChanged tells the publisher of a change that a local state made: a
// shared state signals its changes itself (Shared.Changes), those of its
// own reports included.
func (w *Worker) localChanged(res state.MergeResult) {
	if res.Changed && w.local != nil {
		w.pub.changed()
	}
}

// clockBase is the origin of monoNow.
var clockBase = time.Now()

// monoNow is time.Now for measuring durations: it reads only the monotonic
// clock, one clock read where time.Now makes two.
func monoNow() time.Time { return clockBase.Add(time.Since(clockBase)) }

// appliedSince returns how long a report applied in res took since start,
// ending at the time that the Manager read when it applied it, so that a
// report reads the clock once more, not twice; without that time (a
// replica's result) or with one before start (a Manager's Options.Now that
// is not the clock), it reads the clock. The worker's Manager uses the
// clock (time.Now).
func appliedSince(start time.Time, res state.MergeResult) time.Duration {
	if res.Applied.IsZero() || res.Applied.Before(start) {
		return time.Since(start)
	}
	return res.Applied.Sub(start)
}

// decodeReport decodes and checks one report into w.report. It returns
// the node the report is of, once known, and its flows.
func (w *Worker) decodeReport(msg *nats.Msg) (node uint64, hasNode bool, flows []flowstate.Flow, err error) {
	token := msg.Subject[min(len(w.hbPrefix), len(msg.Subject)):]
	subjectNode, ok := protocol.ParseNodeToken(token)
	if !ok {
		return 0, false, nil, &badReport{kind: "bad_subject", field: "subject",
			reason: fmt.Sprintf("node id token %q is not a canonical decimal uint64", cut(token, maxTokenEcho))}
	}
	if err := w.dec.Decode(msg.Data, &w.report); err != nil {
		return subjectNode, true, nil, err
	}
	if w.report.NodeID != subjectNode {
		return subjectNode, true, nil, &badReport{kind: "subject_mismatch", field: "node_id",
			reason: fmt.Sprintf("body node_id %d differs from the subject's node id %d", w.report.NodeID, subjectNode)}
	}
	return subjectNode, true, w.report.Flows, nil
}

// deadLetter sends a report rejected as bad input (400) to the dead-letter
// subject, if one is set, with the verdict in headers.
func (w *Worker) deadLetter(msg *nats.Msg, v verdict) {
	if w.cfg.DeadLetterSubject == "" || v.code != protocol.CodeBadRequest {
		return
	}
	dl := &nats.Msg{Subject: w.cfg.DeadLetterSubject, Data: msg.Data, Header: nats.Header{
		protocol.HeaderRejectKind:    []string{v.kind},
		protocol.HeaderRejectError:   []string{cutReason(v.reason)},
		protocol.HeaderRejectSubject: []string{msg.Subject},
	}}
	if err := w.nc.PublishMsg(dl); err != nil {
		w.logThrottled(slog.LevelWarn, "dead-letter publish failed", slog.String("subject", w.cfg.DeadLetterSubject), slog.Any("err", err))
	}
}
