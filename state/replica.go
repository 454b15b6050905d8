package state

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/throttle"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"
)

// This file is the Replica's state machine: its phases, its fields by
// owner, and every transition, one function per event, as etcd raft's step
// functions are:
//
//   - onEvent: the watch delivered an event: a node's value or deletion, a
//     reset, the end of the store's content;
//   - Submit and Refuse: this worker was given a report (replica_submit.go);
//   - onStored: the store answered the write of a report (replica_submit.go);
//   - onTick: the clock ticked (a write the watch is late to apply);
//   - stop: Run ends (replica_run.go).
//
// Each changes the fields under mu, lets go of it, then answers the reports
// whose turn has come, in order (answerReady, replica_queue.go); the watch's
// and the store's events leave that to Run's goroutine (wakeAnswers). A
// report's own write moves through the phases of replica_write.go.

// phase is where a Replica is: what it serves, and what it does with a
// report.
type phase uint8

const (
	// idle: Run has not started. Nothing is served; reports are answered
	// with an error wrapping kv.ErrUnavailable.
	idle phase = iota
	// loading: the watch is reading the store's content, at start-up or in
	// a new epoch. Nothing is served; reports are answered as in idle.
	loading
	// following: the served state is the watch's, exact, at the revision
	// of the last node write it applied.
	following
	// frozen: the watch delivers writes that make no state the store ever
	// had (it fell behind and skips writes that later ones replaced, or it
	// reads the store again in the same epoch): the last exact state stays
	// served, at its revision, until the watch has caught up with it.
	frozen
	// stopped: Run has returned. Nothing is served, and every report given
	// to the Replica has been answered.
	stopped
)

// Replica serves the state of a store that several workers share
// (kv.Shared): it applies every node-key write of the store's watch, its
// own and the others', in the store's order. See the package
// documentation, "Following a shared store". Create it with NewReplica and
// run it with Run.
//
// Lock order: pubMu (Flush), the lease's write lock (lease.WithFence),
// submitMu (Submit, Refuse), mu, the lease's own lock (lease.Observe,
// under mu). mu is never held during I/O, nor while a Completion runs.
type Replica struct {
	// Set by NewReplica; read-only after.
	store   Store
	opts    ReplicaOptions
	log     *slog.Logger
	lease   *lease.Lease
	kick    chan struct{} // wakes the lease loop; capacity 1
	changes chan struct{} // the served state changed or this worker became the publisher; capacity 1
	window  chan struct{} // a token per report between Submit and its answer; capacity Window

	pubMu sync.Mutex // serialises the aggregate key's writes; guards pub
	pub   publishing

	sendKick chan struct{} // wakes the sender (sendLoop); capacity 1
	answers  chan struct{} // wakes Run's goroutine to answer (wakeAnswers); capacity 1

	submitMu sync.Mutex // serialises Submit and Refuse: reports queue in the order the store takes them; guards enc
	enc      []byte     // the value of the write being sent

	refuseLog *throttle.Throttle // rate-limits the log lines of refused values

	mu     sync.Mutex // guards every field below
	phase  phase
	watch  watched  // what the watch applied; written by onEvent only
	served served   // what reads see
	writes queue    // this worker's reports, from Submit to their answer
	deltas deltas   // what Delta handed out
	wait   waiters  // Sync, WaitLoaded, Drain and EvictSilent waiting for the watch
	outbox []resend // the writes for the sender to send (postLocked)
	clock  uint64   // ticks of the clock (onTick), for the deadlines of writes
	// conflicts counts the reports whose write the store refused
	// (ErrConflict).
	conflicts uint64
}

// watched is what the watch applied in the current epoch.
type watched struct {
	epoch      string              // the store's epoch; "" before the first OpReset
	epochStart uint64              // the epoch key's write: node writes below it are the last epoch's (kv.OpReset)
	delivered  uint64              // the last write delivered, of any key
	nodeWrite  uint64              // the last node-key write applied
	agg        *Aggregate          // every node's last value, by the rule
	nodes      map[uint64]nodeSeen // per node of agg
	keys       map[uint64]uint64   // per node, its key's last write delivered in the epoch, a deletion included: a write's condition
	refused    refusals            // what the rule refused, since Run began
	flows      []flowstate.Flow    // scratch: the value being applied
	health     flowstate.Health    // scratch: the v3 part of the value being applied
	errors     errorLoad           // the errors the nodes' health holds
}

// served is the state that reads see: the watch's while following, the last
// exact one while frozen.
type served struct {
	revision uint64           // the served revision
	changeAt uint64           // the served revision at which the aggregate last changed
	written  uint64           // the served revision last written to the aggregate key by this worker; 0: none
	changed  bool             // the watch changed the aggregate since it was last served
	frozen   []flowstate.Flow // the last exact state, served while frozen
}

// onEvent is the watch's callback: one event, in the store's order.
func (r *Replica) onEvent(ev kv.Event) {
	if r.applyEvent(ev) {
		r.wakeAnswers()
	}
}

// applyEvent applies ev under mu, and settles the overtaken writes that it
// may settle (sweepOvertakenLocked); false if the Replica has stopped.
func (r *Replica) applyEvent(ev kv.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase == stopped {
		return false
	}
	fresh := ev.Op == kv.OpReset || ev.Op == kv.OpSynced || ev.Revision.Seq > r.watch.delivered
	changed := false
	switch ev.Op {
	case kv.OpReset:
		r.resetLocked(ev.Revision.Epoch, ev.Revision.Seq)
	case kv.OpSynced:
		changed = r.settleLocked()
	default:
		changed = r.writeLocked(ev)
	}
	// The lease sees the event once the watch has moved, so that either it
	// or tookLease, whichever comes second, sees this worker's takeover
	// applied.
	if fresh {
		free, took := r.lease.Observe(ev)
		if free {
			r.kickLease()
		}
		if took {
			r.deltas.resync = true // a new publisher's first delta makes clients resync
			changed = true
		}
	}
	if changed {
		r.signalChange()
	}
	r.wait.broadcastLocked()
	r.sweepOvertakenLocked()
	return true
}

// resetLocked starts the watch over at epoch, whose key the store wrote at
// start. In the same epoch a Replica that serves keeps its last exact state
// served (frozen) until the new pass has caught up with it; in a new one it
// starts over, empty.
func (r *Replica) resetLocked(epoch string, start uint64) {
	w := &r.watch
	if epoch == w.epoch && (r.phase == following || r.phase == frozen) {
		r.freezeLocked()
		r.deltas.resync = true // the reread does not track what changed
	} else {
		if w.epoch != "" && w.epoch != epoch {
			r.log.Info("new epoch: the state starts over", slog.String("epoch", epoch), slog.String("previous", w.epoch))
		}
		r.phase = loading
		r.served = served{frozen: r.served.frozen[:0]}
		r.deltas = deltas{}
	}
	w.epoch, w.epochStart = epoch, start
	w.agg.Reset()
	clear(w.nodes)
	clear(w.keys)
	w.errors = errorLoad{}
	w.delivered, w.nodeWrite = 0, 0
	r.writes.behind, r.writes.passed = 0, 0
}

// writeLocked applies a put or a deletion, and reports whether the served
// state changed.
func (r *Replica) writeLocked(ev kv.Event) bool {
	w := &r.watch
	seq := ev.Revision.Seq
	if seq <= w.delivered {
		return false // delivered twice
	}
	if !ev.Exact {
		r.freezeLocked()
	}
	w.delivered = seq
	if strings.HasPrefix(ev.Key, flowstate.NodeKeyPrefix) {
		id, ok := flowstate.NodeOfKey(ev.Key)
		if ok {
			// Every write of the key counts for the condition of the next
			// one, those left out of the epoch's state too: the store
			// compares with the key's last write, whatever it was.
			w.keys[id] = seq
		}
		switch {
		case seq <= w.epochStart:
		case ok:
			r.applyNodeLocked(id, ev)
		default:
			r.refuseLocked(RefusedKey, ev, nil)
		}
	}
	if ev.Exact && r.phase != loading {
		return r.settleLocked()
	}
	return false
}

// applyNodeLocked applies a write of node id's key by the rule that
// depends on the value alone, the same in every worker, whether it follows
// the store live or loads it, for its own writes and the others'
// (PROTOCOL.md, "What a worker applies from a shared store"): a
// FlowStateValue by serde_json's rules, its v3 fields by a report's, is
// the node's report; anything else is no value, and the node is absent as
// if its key were deleted. No flag of this worker takes part: workers with
// other limits hold the same state. (A key whose node token is not
// canonical is ignored: writeLocked.)
func (r *Replica) applyNodeLocked(id uint64, ev kv.Event) {
	w := &r.watch
	w.nodeWrite = ev.Revision.Seq
	var flows []flowstate.Flow
	var l lineage
	var h *flowstate.Health
	ok := ev.Op == kv.OpPut
	if ok {
		flows, l, h, ok = r.valueLocked(id, ev)
	}
	w.errors = w.errors.minus(loadOf(w.nodes[id].health))
	if !ok {
		if w.agg.Remove(id) {
			r.served.changed = true
		}
		delete(w.nodes, id)
		return
	}
	w.errors = w.errors.plus(loadOf(h))
	if _, changed := w.agg.applyNode(id, w.agg.nodes[id], flows, healthFlows(h)); changed {
		r.served.changed = true
	}
	r.writes.nodeApplied(id)
	// The nodes view tells the store's time of the write, the same on every
	// worker; a node's silence is measured on this worker's own clock,
	// from when it applied the write (a worker that starts counts afresh),
	// so that a worker's clock ahead of the servers' evicts no live node,
	// and one behind still evicts.
	heard := r.opts.Clock.Now()
	at := ev.Time
	if at.IsZero() {
		at = heard
	}
	w.nodes[id] = nodeSeen{at: at, heard: heard, revision: ev.Revision.Seq, lineage: l, health: h}
}

// valueLocked reads node id's value by the rule: its flows and its
// lineage (node_epoch, seq and retired epochs) and flows' health, with v3
// fields; or false for no value. A write of this worker whose store's answer has come is
// read from the report kept since Submit (what its bytes decode to); any
// other is decoded, its v3 fields checked by the rules of a report's.
func (r *Replica) valueLocked(id uint64, ev kv.Event) ([]flowstate.Flow, lineage, *flowstate.Health, bool) {
	w := &r.watch
	own := r.writes.ownLocked(w.epoch, id, ev.Revision.Seq)
	var l lineage
	var h *flowstate.Health
	var err error
	if own != nil {
		w.flows = append(w.flows[:0], own.flows...)
		l, h = own.lineage, keepHealth(own.health)
	} else if w.flows, err = flowstate.AppendValueFlows(w.flows[:0], ev.Value); err != nil {
		r.refuseLocked(RefusedInvalid, ev, err)
		return nil, l, nil, false
	} else if l, err = r.lineageOfLocked(ev.Value); err != nil {
		r.refuseLocked(RefusedInvalid, ev, err)
		return nil, l, nil, false
	} else {
		h = keepHealth(&w.health)
	}
	return w.flows, l, h, true
}

// lineageOfLocked reads the lineage a stored value's v3 fields give (none
// without them), or why they break the rules of a report's.
func (r *Replica) lineageOfLocked(value []byte) (lineage, error) {
	h := &r.watch.health
	epoch, hasEpoch, err := flowstate.DecodeNodeHealth(value, h)
	if err != nil || !h.IsV3() && !hasEpoch && len(h.RetiredEpochs) == 0 {
		return lineage{}, err
	}
	l := lineage{epoch: epoch, hasEpoch: hasEpoch, seq: h.Seq, hasSeq: h.HasSeq}
	if len(h.RetiredEpochs) > 0 {
		l.retired = slices.Clone(h.RetiredEpochs)
	}
	return l, nil
}

// freezeLocked keeps the state served while the watch delivers writes that
// do not make an exact state; only a Replica that serves freezes.
func (r *Replica) freezeLocked() {
	if r.phase != following {
		return
	}
	r.served.frozen = r.watch.agg.AppendFlows(r.served.frozen[:0])
	r.phase = frozen
}

// settleLocked serves the watch's state, which is exact, and reports
// whether it changed. A watch that started over in the same epoch may read
// a stream that is behind what was served (a server that has not yet learnt
// it is no longer the stream's leader answers for a while): the last exact
// state stays served until the watch has reached it, so that a revision
// never labels another state than its own.
func (r *Replica) settleLocked() bool {
	s, w := &r.served, &r.watch
	if r.phase == frozen && w.nodeWrite < s.revision {
		return false
	}
	r.phase = following
	if w.nodeWrite > s.revision {
		if s.revision == 0 {
			s.changed = true // the first report of the epoch creates the aggregate
		}
		s.revision = w.nodeWrite
	}
	changed := s.changed
	if changed {
		s.changed = false
		s.changeAt = s.revision
	}
	return changed
}

// onTick moves the clock on: a write the watch has not applied by its
// deadline is answered unavailable, and an overtaken one whose watch has
// not passed the write that beat it, ErrConflict.
func (r *Replica) onTick() {
	r.mu.Lock()
	r.clock++
	r.sweepOvertakenLocked()
	r.mu.Unlock()
	r.answerReady()
}

// outcomeLocked is the answer of the report e, if it has one yet.
func (r *Replica) outcomeLocked(e *write) (MergeResult, error, bool) {
	switch {
	case e.err != nil:
		return MergeResult{}, e.err, true
	case e.awaitsStore() && r.phase == stopped:
		return MergeResult{}, fmt.Errorf("state: report of node %d not stored before the worker stopped: %w", e.node, errNotSeen(stopped)), true
	case e.awaitsStore() && r.clock > e.deadline:
		// Its put, or the write before it, has no answer from the store
		// in time: answered now, and abandoned to whatever the store says.
		return MergeResult{}, fmt.Errorf("state: report of node %d: the store did not answer its write in time: %w", e.node, errNotSeen(r.phase)), true
	case e.awaitsStore():
		return MergeResult{}, nil, false // the store has not answered yet
	case e.seq <= e.delivered:
		// A new write below what the watch had seen: the bucket was
		// recreated under us, and the watch is about to start over.
		return MergeResult{}, fmt.Errorf("%w (revision %d went back below %d)", ErrStoreCleared, e.seq, e.delivered), true
	case r.watch.epoch != e.epoch:
		return MergeResult{}, fmt.Errorf("%w (epoch %s ended)", ErrStoreCleared, e.epoch), true
	case r.servesLocked(e.seq):
		// Its own revision: the one at which the report took effect, so
		// that no two reports are acked with the same revision (the state
		// served may be further on already).
		return MergeResult{Version: flowstate.Version{Epoch: e.epoch, Revision: e.seq}, Changed: r.served.changeAt > e.rev}, nil, true
	case r.phase == stopped, r.clock > e.deadline:
		if r.phase != stopped {
			// Until the watch reaches it, reports fail at once rather
			// than queue behind this one.
			r.writes.behind = max(r.writes.behind, e.seq)
		}
		return MergeResult{}, fmt.Errorf("state: report of node %d stored at revision %d, not seen by the watch: %w",
			e.node, e.seq, errNotSeen(r.phase)), true
	}
	return MergeResult{}, nil, false
}
