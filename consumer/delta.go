package consumer

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// v2State is the worker's state for <prefix>.state.delta. Its fields are
// guarded by Worker.pubMu, as publishState runs under it.
type v2State struct {
	flows []flowstate.Flow  // the last delta's flows, reused
	buf   []byte            // the last delta's body, reused
	last  flowstate.Version // of the last delta published
	// notPublisher is set while another worker of a shared store publishes:
	// deltas were published that this worker did not track, so its next
	// delta is a resync.
	notPublisher bool
}

// publishDeltaLocked publishes what changed since the previous delta on
// <prefix>.state.delta, unless nothing did. A delta that would not fit the
// connection's max payload, headers included, goes out as a resync: no
// flows and Flow-State-Resync: 1. The caller holds pubMu.
func (w *Worker) publishDeltaLocked(ctx context.Context) {
	subject := protocol.SubjectsOf(w.cfg.Prefix).Delta
	d, err := w.mgr.Delta(ctx, w.v2.flows)
	if err != nil {
		w.logThrottled(slog.LevelError, "delta not published", slog.String("subject", subject), slog.Any("err", err))
		return
	}
	w.v2.flows = d.Flows
	if d.Version == w.v2.last && !w.v2.notPublisher {
		return
	}
	if w.v2.notPublisher {
		d.Resync = true
	}
	h := versionHeader(d.Version)
	h.Set(protocol.HeaderBaseRevision, strconv.FormatUint(d.Base, 10))
	h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	flows := d.Flows
	if !d.Resync && int64(codec.DeltaLen(d.Base, flows)+headerSize(h)) > w.nc.MaxPayload() {
		d.Resync = true
	}
	if d.Resync {
		h.Set(protocol.HeaderResync, "1")
		flows = nil
	}
	w.v2.buf = codec.AppendDelta(w.v2.buf[:0], d.Base, flows)
	if err := w.nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: w.v2.buf}); err != nil {
		w.stats.publishErrors.Add(1)
		w.logThrottled(slog.LevelError, "delta not published", slog.String("subject", subject), slog.Any("err", err))
		return
	}
	w.v2.last, w.v2.notPublisher = d.Version, false
	w.stats.deltas.Add(1)
	w.stats.deltaBytes.Store(int64(len(w.v2.buf)))
	if d.Resync {
		w.stats.deltaResyncs.Add(1)
	}
}
