package consumer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"flowstate/flowstate"
	"flowstate/protocol"
)

// handleHeartbeat applies one report. The client library calls it from one
// goroutine, in arrival order.
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
		start = time.Now()
	}
	node, hasNode, res, err := w.apply(msg)
	if err != nil {
		v := w.failReport(msg, node, hasNode, err)
		w.deadLetter(msg, v)
		return
	}
	w.stats.applied.Add(1)
	if w.cfg.OnApplied != nil {
		w.cfg.OnApplied(time.Since(start))
	}
	w.noteNodeEpoch(w.report.NodeID, w.report.NodeEpoch, w.report.HasNodeEpoch)
	if msg.Reply != "" {
		if err := msg.RespondMsg(&nats.Msg{Header: versionHeader(chaosAck(res).Version)}); err != nil {
			w.logThrottled(slog.LevelWarn, "ack failed", slog.String("subject", cutToken(msg.Subject)),
				slog.Uint64("node_id", w.report.NodeID), slog.Any("err", err))
		} else {
			w.stats.acked.Add(1)
		}
	}
	if res.Changed {
		w.pub.changed()
	}
}

// apply decodes, checks and merges one report, under the base context. It
// returns the node the report is of, once known.
func (w *Worker) apply(msg *nats.Msg) (node uint64, hasNode bool, res flowstate.MergeResult, err error) {
	token := msg.Subject[min(len(w.hbPrefix), len(msg.Subject)):]
	subjectNode, ok := protocol.ParseNodeToken(token)
	if !ok {
		return 0, false, res, &badReport{kind: "bad_subject", field: "subject",
			reason: fmt.Sprintf("node id token %q is not a canonical decimal uint64", cut(token, maxTokenEcho))}
	}
	if err := w.dec.Decode(msg.Data, &w.report); err != nil {
		return subjectNode, true, res, err
	}
	if w.report.NodeID != subjectNode {
		return subjectNode, true, res, &badReport{kind: "subject_mismatch", field: "node_id",
			reason: fmt.Sprintf("body node_id %d differs from the subject's node id %d", w.report.NodeID, subjectNode)}
	}
	res, err = w.mgr.MergeFlows(w.ctx, w.report.NodeID, w.report.Flows)
	return subjectNode, true, res, err
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
