package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"flowstate/protocol"

	"github.com/nats-io/nats.go/micro"
	"github.com/vmihailenco/msgpack/v5"
)

// NodeView is one entry of the per-node view on <prefix>.state.nodes.
type NodeView struct {
	NodeID uint64 `msgpack:"node_id" json:"node_id"`
	// NodeEpoch is the node_epoch of its last report; nil if it sent none.
	NodeEpoch *uint64 `msgpack:"node_epoch" json:"node_epoch"`
	// LastReport is when the worker applied its last report, unix ms.
	LastReport int64 `msgpack:"last_report" json:"last_report"`
	Flows      int   `msgpack:"flows" json:"flows"`
}

// noteNodeEpoch remembers the node_epoch of a node's applied report.
func (w *Worker) noteNodeEpoch(node uint64, epoch uint64, has bool) {
	w.epochsMu.Lock()
	defer w.epochsMu.Unlock()
	if has {
		w.epochs[node] = epoch
	} else {
		delete(w.epochs, node)
	}
}

// handleNodes answers the per-node view: msgpack, or JSON when the request
// accepts application/json.
func (w *Worker) handleNodes(req micro.Request) {
	nodes, v, err := w.mgr.Nodes(context.Background())
	if err != nil {
		vd := judge(err)
		_ = req.Error(fmt.Sprint(vd.code), "state unavailable: "+vd.reason, nil)
		return
	}
	view := make([]NodeView, len(nodes))
	w.epochsMu.Lock()
	for i, n := range nodes {
		view[i] = NodeView{NodeID: n.ID, LastReport: n.LastReport.UnixMilli(), Flows: n.Flows}
		if e, ok := w.epochs[n.ID]; ok {
			view[i].NodeEpoch = &e
		}
	}
	w.epochsMu.Unlock()
	h := versionHeader(v)
	var body []byte
	if wantsJSON(req.Headers().Get(protocol.HeaderAccept)) {
		h.Set(protocol.HeaderContentType, protocol.ContentTypeJSON)
		body, err = json.Marshal(view)
	} else {
		h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
		body, err = msgpack.Marshal(view)
	}
	if err != nil {
		_ = req.Error("500", "encode the node view: "+err.Error(), nil)
		return
	}
	if int64(len(body)+headerSize(h)) > w.nc.MaxPayload() {
		_ = req.Error("413", fmt.Sprintf("node view of %d bytes exceeds the connection's max payload of %d bytes", len(body), w.nc.MaxPayload()), nil)
		return
	}
	_ = req.Respond(body, micro.WithHeaders(micro.Headers(h)))
}

// evictLoop evicts nodes silent for longer than the TTL until stop closes.
func (w *Worker) evictLoop(ttl time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	period := min(max(ttl/4, 10*time.Millisecond), 5*time.Second)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			evicted, res, err := w.mgr.EvictSilent(context.Background(), now.Add(-ttl))
			for _, id := range evicted {
				w.stats.evicted.Add(1)
				w.noteNodeEpoch(id, 0, false)
				w.log.Info("node evicted: silent longer than the node TTL", slog.Uint64("node_id", id), slog.Duration("ttl", ttl))
			}
			if err != nil {
				w.logThrottled(errorLevel, "node eviction failed", slog.Any("err", err))
			}
			if res.Changed {
				w.pub.changed()
			}
		}
	}
}
