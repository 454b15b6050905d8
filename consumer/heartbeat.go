package consumer

import (
	"context"
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
	var start time.Time
	if w.cfg.OnApplied != nil {
		start = time.Now()
	}
	res, err := w.apply(msg)
	if err != nil {
		w.rejectReport(msg, err)
		return
	}
	w.stats.applied.Add(1)
	if w.cfg.OnApplied != nil {
		w.cfg.OnApplied(time.Since(start))
	}
	w.noteNodeEpoch(w.report.NodeID, w.report.NodeEpoch, w.report.HasNodeEpoch)
	if msg.Reply != "" {
		if err := msg.RespondMsg(&nats.Msg{Header: versionHeader(chaosAck(res).Version)}); err != nil {
			w.logThrottled(slog.LevelWarn, "ack failed", slog.String("subject", msg.Subject),
				slog.Uint64("node_id", w.report.NodeID), slog.Any("err", err))
		} else {
			w.stats.acked.Add(1)
		}
	}
	if res.Changed && !w.mgr.Following() {
		w.pub.changed() // a following manager signals its changes itself
	}
}

// apply decodes, checks and merges one report.
func (w *Worker) apply(msg *nats.Msg) (flowstate.MergeResult, error) {
	token := msg.Subject[min(len(w.hbPrefix), len(msg.Subject)):]
	subjectNode, ok := protocol.ParseNodeToken(token)
	if !ok {
		return flowstate.MergeResult{}, &badReport{kind: "bad_subject", field: "subject",
			reason: fmt.Sprintf("node id token %q is not a canonical decimal uint64", token)}
	}
	if err := w.dec.Decode(msg.Data, &w.report); err != nil {
		return flowstate.MergeResult{}, err
	}
	if w.report.NodeID != subjectNode {
		return flowstate.MergeResult{}, &badReport{kind: "subject_mismatch", field: "node_id",
			reason: fmt.Sprintf("body node_id %d differs from the subject's node id %d", w.report.NodeID, subjectNode)}
	}
	return w.mgr.MergeFlows(context.Background(), w.report.NodeID, w.report.Flows)
}

// rejectReport counts, logs and answers a report that was not applied.
func (w *Worker) rejectReport(msg *nats.Msg, err error) {
	v := judge(err)
	w.stats.reject(v.kind)
	level := slog.LevelWarn
	if v.code >= 500 {
		level = slog.LevelError
	}
	w.logThrottled(level, "report rejected", slog.String("subject", msg.Subject),
		slog.String("reason", v.kind), slog.Int("code", v.code), slog.Any("err", err))
	if msg.Reply != "" {
		if err := msg.RespondMsg(&nats.Msg{Header: errorHeader(v.code, v.reason)}); err != nil {
			w.logThrottled(slog.LevelWarn, "rejection reply failed", slog.String("subject", msg.Subject), slog.Any("err", err))
		}
	}
	if w.cfg.DeadLetterSubject != "" && v.code == 400 {
		dl := &nats.Msg{Subject: w.cfg.DeadLetterSubject, Data: msg.Data, Header: nats.Header{
			protocol.HeaderRejectKind:    []string{v.kind},
			protocol.HeaderRejectError:   []string{v.reason},
			protocol.HeaderRejectSubject: []string{msg.Subject},
		}}
		if err := w.nc.PublishMsg(dl); err != nil {
			w.logThrottled(slog.LevelWarn, "dead-letter publish failed", slog.String("subject", w.cfg.DeadLetterSubject), slog.Any("err", err))
		}
	}
}
