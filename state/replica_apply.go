package state

import (
	"log/slog"
	"strconv"
	"strings"

	"github.com/flowstate-io/flowstate/kv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// apply is the watch's callback: it applies one event. The lease sees the
// event under mu, after the watermark moved, so that either it or
// tookLease, whichever comes second, sees this worker's takeover applied.
func (r *Replica) apply(ev kv.Event) {
	r.mu.Lock()
	fresh := ev.Op == kv.OpReset || ev.Op == kv.OpSynced || ev.Revision.Seq > r.watermark
	signal := r.applyLocked(ev)
	var free, applied bool
	if fresh && !r.stopped {
		free, applied = r.lease.Observe(ev)
	}
	if applied {
		r.resync = true // a new publisher's first delta makes clients resync
		signal = true
	}
	r.mu.Unlock()
	if free {
		r.kickLease()
	}
	if signal {
		r.opts.OnChange()
	}
}

// applyLocked applies one event and reports whether the served state
// changed.
func (r *Replica) applyLocked(ev kv.Event) bool {
	if r.stopped {
		return false
	}
	switch ev.Op {
	case kv.OpReset:
		r.resetLocked(ev.Revision.Epoch)
		r.epochStart = ev.Revision.Seq
		return false
	case kv.OpSynced:
		r.ready = true
		return r.settleLocked()
	}
	if ev.Revision.Seq <= r.watermark {
		return false // delivered twice
	}
	if r.ready && !ev.Exact && !r.frozen {
		r.freezeLocked()
	}
	r.watermark = ev.Revision.Seq
	if strings.HasPrefix(ev.Key, flowstate.NodeKeyPrefix) && ev.Revision.Seq > r.epochStart {
		r.applyNodeLocked(ev)
	}
	if r.ready && ev.Exact {
		return r.settleLocked()
	}
	r.broadcastLocked() // the watermark moved
	return false
}

// resetLocked starts over at epoch. In the same epoch (the watch restarted)
// it keeps serving the last exact state until the new pass is exact.
func (r *Replica) resetLocked(epoch string) {
	if epoch == r.epoch && r.ready {
		if !r.frozen {
			r.freezeLocked()
		}
		r.resync = true // the reread does not track what changed
	} else {
		if r.epoch != "" {
			r.log.Info("new epoch: the state starts over", slog.String("epoch", epoch), slog.String("previous", r.epoch))
		}
		r.epoch, r.rev = epoch, 0
		r.ready, r.frozen, r.changed = false, false, false
		r.changeRev, r.wroteRev = 0, 0
		r.deltaBase, r.resync = 0, false
	}
	r.agg.Reset()
	clear(r.nodes)
	r.forgetOwnLocked()
	r.watermark, r.nodeRev, r.behind = 0, 0, 0
	r.broadcastLocked()
}

// freezeLocked keeps serving the current state while the watch delivers
// writes that do not make an exact state.
func (r *Replica) freezeLocked() {
	r.frozenFlows = r.agg.AppendFlows(r.frozenFlows[:0])
	r.frozen = true
}

// settleLocked serves the current state, which is exact, and reports
// whether it changed. A watch that started over in the same epoch may
// read a stream that is behind what was served (a server that has not yet
// learnt it is no longer the stream's leader answers for a while): the
// last exact state stays served until the watch has reached it, so that
// a revision never labels another state than its own.
func (r *Replica) settleLocked() bool {
	if r.frozen && r.nodeRev < r.rev {
		return false
	}
	r.frozen = false
	if r.nodeRev > r.rev {
		if r.rev == 0 {
			r.changed = true // the first report of the epoch creates the aggregate
		}
		r.rev = r.nodeRev
	}
	changed := r.changed
	if changed {
		r.changed = false
		r.changeRev = r.rev
	}
	r.broadcastLocked()
	return changed
}

// applyNodeLocked applies a write of a node's key. A write of this worker
// is applied from the flows it retained, others' are decoded.
func (r *Replica) applyNodeLocked(ev kv.Event) {
	digits, ok := strings.CutPrefix(ev.Key, flowstate.NodeKeyPrefix)
	id, err := strconv.ParseUint(digits, 10, 64)
	if ok && err == nil {
		r.keyBuf = strconv.AppendUint(r.keyBuf[:0], id, 10)
	}
	if !ok || err != nil || string(r.keyBuf) != digits { // the key is NodeKey(id)
		r.log.Warn("ignoring a key under the node prefix that no worker writes", slog.String("key", ev.Key))
		return
	}
	r.spare = r.spare[:0]
	if ev.Op == kv.OpPut {
		if flows, ok := r.ownFlowsLocked(id, ev.Value, ev.Revision.Seq); ok {
			r.spare = flows
		} else {
			flows, err := flowstate.AppendValueFlows(r.spare, ev.Value)
			if err != nil {
				r.log.Error("ignoring a node report that does not decode", slog.Uint64("node_id", id),
					slog.Uint64("revision", ev.Revision.Seq), slog.Any("err", err))
				return
			}
			r.spare = flows
		}
	}
	r.nodeRev = ev.Revision.Seq
	if ev.Op == kv.OpDelete {
		if r.agg.Remove(id) {
			r.changed = true
		}
		delete(r.nodes, id)
		return
	}
	if r.agg.Apply(id, r.spare) {
		r.changed = true
	}
	delete(r.ownNew, id) // in agg now
	n := r.nodes[id]
	if n == nil {
		n = &replicaNode{}
		r.nodes[id] = n
	}
	// The store's time of the write, so that a node's silence is measured
	// from its report, whenever this worker read it.
	n.seen, n.rev = ev.Time, ev.Revision.Seq
	if n.seen.IsZero() {
		n.seen = r.opts.Now()
	}
}

// tookLease is called by the lease loop when this worker took the lease.
func (r *Replica) tookLease(rev uint64) {
	r.mu.Lock()
	r.wroteRev = 0 // write the aggregate key at once
	signal := r.watermark >= rev
	if signal {
		r.resync = true
	}
	r.mu.Unlock()
	if signal {
		r.opts.OnChange()
	}
}
