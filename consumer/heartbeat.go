package consumer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// handleHeartbeat takes one report. The client library calls it from one
// goroutine, in arrival order; the mode's intake gives the report to the
// state, which answers it now (a local state) or later (a shared one).
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
	w.waiting.taken(w.cfg.Clock.Now())
	w.in.take(msg, start)
}

// answer acknowledges a report applied, or answers why it was not. The
// report stops waiting as its answer is sent: before, so that whoever
// receives the answer finds it counted (a blocked send stalls the answers
// after it, whose reports keep ageing).
func (w *Worker) answer(h *heartbeat, res state.MergeResult, err error) {
	w.waiting.answered()
	w.respond(h, res, err)
}

func (w *Worker) respond(h *heartbeat, res state.MergeResult, err error) {
	if err != nil {
		v := w.failReport(h.msg, h.node, h.hasNode, err)
		w.deadLetter(h.msg, v)
		return
	}
	w.stats.applied.Add(1)
	if w.cfg.OnApplied != nil {
		w.cfg.OnApplied(appliedSince(h.start, res))
	}
	w.noteNodeEpoch(h.rep.Node, h.rep.NodeEpoch, h.rep.HasNodeEpoch)
	if h.msg.Reply != "" {
		if err := h.msg.RespondMsg(&nats.Msg{Header: versionHeader(res.Version)}); err != nil {
			w.logThrottled(slog.LevelWarn, "ack failed", slog.String("subject", cutToken(h.msg.Subject)),
				slog.Uint64("node_id", h.node), slog.Any("err", err))
		} else {
			w.stats.acked.Add(1)
		}
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

// decode decodes and checks the report of h.msg into h: the node it is
// of, once known, and the report (whose flows are w.report's).
func (w *Worker) decode(h *heartbeat) error {
	msg := h.msg
	token := msg.Subject[min(len(w.hbPrefix), len(msg.Subject)):]
	subjectNode, ok := protocol.ParseNodeToken(token)
	if !ok {
		return &badReport{kind: "bad_subject", field: "subject",
			reason: fmt.Sprintf("node id token %q is not a canonical decimal uint64", cut(token, maxTokenEcho))}
	}
	h.node, h.hasNode = subjectNode, true
	if err := w.dec.Decode(msg.Data, &w.report); err != nil {
		return err
	}
	if w.report.NodeID != subjectNode {
		return &badReport{kind: "subject_mismatch", field: "node_id",
			reason: fmt.Sprintf("body node_id %d differs from the subject's node id %d", w.report.NodeID, subjectNode)}
	}
	h.rep = state.Report{Node: subjectNode, NodeEpoch: w.report.NodeEpoch, HasNodeEpoch: w.report.HasNodeEpoch, Flows: w.report.Flows}
	if w.report.Health.IsV3() {
		h.rep.Health = &w.report.Health
	}
	return nil
}

// deadLetter sends a report rejected as bad input (400) to the dead-letter
// subject, if one is set, with the verdict in headers.
func (w *Worker) deadLetter(msg *nats.Msg, v verdict) {
	if w.cfg.DeadLetterSubject == "" || v.code != protocol.CodeBadRequest {
		return
	}
	dl := &nats.Msg{Subject: w.cfg.DeadLetterSubject, Data: msg.Data, Header: nats.Header{
		protocol.HeaderRejectKind:    []string{v.kind},
		protocol.HeaderRejectError:   []string{echoHeader(v.reason, maxReasonEcho)},
		protocol.HeaderRejectSubject: []string{echoHeader(cutToken(msg.Subject), maxReasonEcho)},
	}}
	if err := w.nc.PublishMsg(dl); err != nil {
		w.logThrottled(slog.LevelWarn, "dead-letter publish failed", slog.String("subject", w.cfg.DeadLetterSubject), slog.Any("err", err))
	}
}
