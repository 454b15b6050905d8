package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// The write path of a Replica: a report given to it (Submit, Refuse), its
// node-key write, conditional on the key's last write, and the store's
// answer to it (onStored), which sends the write of the same node chained
// after it.

// ErrConflict is wrapped by the answer of a report whose write the store
// refused because the node's key had a later write than the one this
// worker knew of when it sent it: the node's report through another worker
// that this worker's watch had not applied yet, or this worker's own write
// whose outcome was unknown. Nothing was stored. It wraps kv.ErrUnavailable
// (a flownode is answered 503, "not stored, send again"): the node's next
// report is conditioned on what the watch applied by then, and settles it.
// The condition is what keeps a write that waited (in a stalled link) from
// landing after a later write of its node.
var ErrConflict = fmt.Errorf("state: the node's key was written meanwhile: %w", kv.ErrUnavailable)

// Submit takes a node's report (flows sorted by ID, each ID once) and
// sends its write to the node's key without waiting for the store, under
// the condition that the key's last write is the one this worker knows
// of (see the package documentation, "Following a shared store"); a write
// of the node that this worker sent before and the store has not answered
// yet goes first, and this one follows once its answer has come. c is
// told the outcome, once, in the order of the Submit and Refuse calls: the
// result once the write is stored and this worker's watch has applied it
// (so that a get on this worker sees it), or why not: ErrUnsortedFlows, a
// *CapacityError if it would take the state past ReplicaOptions.Limits by
// what the watch applied and this worker's writes in flight (nothing
// written then), ErrConflict if the store refused the condition (nothing
// written), an error wrapping kv.ErrUnavailable if the store did not take
// it, its outcome is unknown, or the watch did not apply it within
// ApplyTimeout, ErrStoreCleared if the store was wiped meanwhile. Submit
// blocks while Window reports wait for their answers, until ctx ends: it
// then returns ctx's error, and c is not called. flows is not retained.
func (r *Replica) Submit(ctx context.Context, rep Report, c Completion) error {
	if err := r.takeTurn(ctx); err != nil {
		return err
	}
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	e, cond, send := r.queueWrite(rep, c)
	if e == nil {
		r.answerReady()
		return nil
	}
	if send {
		r.enc = e.appendValue(r.enc[:0])
		r.send(ctx, e, r.enc, cond)
		clear(r.enc) // the store took its copy: no message outlives the write here
	}
	return nil
}

// queueWrite queues the write of rep, answered by c: refused (nil: it is
// answered in its turn), chained after its node's write before it (its
// value kept, sent when that one is answered), or to send now (send) under
// the condition cond.
func (r *Replica) queueWrite(rep Report, c Completion) (e *write, cond uint64, send bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e = r.writes.push(r, c)
	if err := r.admitLocked(&rep); err != nil {
		e.refuse(err)
		return nil, 0, false
	}
	e.node, e.epoch, e.delivered, e.rev = rep.Node, r.watch.epoch, r.watch.delivered, r.served.revision
	e.deadline = r.clock + applyTicks
	e.nodeEpoch, e.hasEpoch = rep.NodeEpoch, rep.HasNodeEpoch
	if rep.carriesV3() {
		e.health = rep.Health.Clone()
	}
	e.lineage = r.heldLocked(rep.Node).after(&rep)
	e.keepRetired()
	kept := keepHealthOf(&rep)
	r.writes.keepLocked(e, rep.Flows, healthFlows(kept), loadOf(kept), r.opts.Limits.MaxFlows > 0, r.watch.agg)
	cond = r.condLocked(rep.Node)
	e.cond = cond
	if r.writes.chainLocked(e) {
		return e, 0, false // its value is encoded when it is sent (sendLater)
	}
	e.to(sent)
	return e, cond, true
}

// condLocked is the condition of a write of node id sent now: the key's
// last write as the watch applied it, or this worker's last write of the
// node (lastOf) if the store has stored it and the watch not applied it
// yet, whichever is later (0: the key has not been written in the epoch).
func (r *Replica) condLocked(id uint64) uint64 {
	cond := r.watch.keys[id]
	if p := r.writes.lastOf[id]; p != nil && p.err == nil && p.phase == stored && p.epoch == r.watch.epoch {
		cond = max(cond, p.seq)
	}
	return cond
}

// send sends the write of e, value under the condition that the node key's
// last write is cond.
func (r *Replica) send(ctx context.Context, e *write, value []byte, cond uint64) {
	key := flowstate.NodeKey(e.node)
	if err := r.store.PutAsync(ctx, key, value, kv.Condition{Key: key, Revision: cond}, e); err != nil {
		r.onStored(e, kv.Revision{}, err)
	}
}

// resend is a write to send from outside Submit, under cond: one chained
// after a write the store answered, or one whose condition was refused and
// whose watch has passed the write that beat it.
type resend struct {
	e    *write
	cond uint64
}

// postLocked gives s to the sender (sendLoop), which sends it outside
// mu: the goroutines of the watch, of the store's answers and of the clock
// never wait for a slot of the store's window themselves (a put waits for
// one up to ApplyTimeout), so that the store's answers, which free those
// slots, always come through. Writes of one node are never posted twice
// at once (a node's next write waits for the store's answer to this one).
func (r *Replica) postLocked(s resend) {
	r.outbox = append(r.outbox, s)
	select {
	case r.sendKick <- struct{}{}:
	default:
	}
}

// sendLoop is the sender: it sends what postLocked gives it, until ctx
// ends. What is left then is answered by stop.
func (r *Replica) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sendKick:
			r.sendPosted()
		}
	}
}

// sendPosted sends every write posted so far, outside mu, each encoded
// from what it kept of its report.
func (r *Replica) sendPosted() {
	r.mu.Lock()
	sends := r.outbox
	r.outbox = nil
	r.mu.Unlock()
	for _, s := range sends {
		if len(s.e.value) == 0 {
			s.e.value = s.e.appendValue(s.e.value[:0])
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.ApplyTimeout)
		r.send(ctx, s.e, s.e.value, s.cond)
		cancel()
	}
}

// Refuse answers c with err, a report refused before Submit (it does not
// decode), in its turn after the reports given before it, as Submit does.
func (r *Replica) Refuse(ctx context.Context, err error, c Completion) error {
	if err := r.takeTurn(ctx); err != nil {
		return err
	}
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	r.mu.Lock()
	r.writes.push(r, c).refuse(err)
	r.mu.Unlock()
	r.answerReady()
	return nil
}

// onStored is the store's answer to the write of e (write.PutDone). The
// write of its node chained after it, if any, is posted to be sent now,
// conditioned on e's revision if e was stored; or e itself once more, if
// its condition was refused by a write its watch has passed already. It
// never waits for the store.
func (r *Replica) onStored(e *write, rev kv.Revision, err error) {
	r.recordStored(e, rev, err)
	r.wakeAnswers()
}

// recordStored records the store's answer to e, and posts what is to be
// sent now: the write chained after e, or e, overtaken, once more.
func (r *Replica) recordStored(e *write, rev kv.Revision, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	abandoned := e.phase == abandoned
	if !abandoned && e.err == nil && r.overtakeLocked(e, err) {
		if r.watch.keys[e.node] < e.waitFor {
			return
		}
		if s, ok := r.resumeLocked(e); ok {
			r.postLocked(s) // the watch passed it already
			return
		}
		if next, cond := r.nextLocked(e); next != nil { // e is stale: the write chained after it is judged in turn
			r.postLocked(resend{e: next, cond: cond})
		}
		return
	}
	switch {
	case err != nil && e.err == nil && errors.Is(err, kv.ErrRevisionMismatch):
		r.conflicts++
		err = fmt.Errorf("state: report of node %d not stored: %w (%w)", e.node, ErrConflict, err)
	case err != nil && e.err == nil:
		err = fmt.Errorf("state: store report of node %d: %w", e.node, err)
	case err == nil:
		e.seq = rev.Seq
	}
	if next, cond := r.nextLocked(e); next != nil {
		r.postLocked(resend{e: next, cond: cond})
	}
	switch {
	case abandoned:
		r.writes.recycle(e) // answered already (its deadline, Drain or stop): nothing more to do
	case err != nil:
		if e.err != nil {
			err = e.err // answered with what was decided first
		}
		e.refuse(err)
	default:
		e.to(stored)
	}
}

// nextLocked takes the writes chained after e, which the store has just
// answered (or which ended without a put), and returns the first of them
// to send now, with its condition, or nil if none is. Each one that is not
// sent (answered meanwhile, refused, or Run has ended) hands its own chain
// on to the judgement in turn, so that no write is left chained behind a
// write that nothing moves any more.
func (r *Replica) nextLocked(e *write) (*write, uint64) {
	next := e.next
	e.next = nil
	var cond uint64
	landed := e.err == nil && e.seq != 0 && e.epoch == r.watch.epoch
	for next != nil {
		after := next.next
		next.next = nil
		cond = r.watch.keys[next.node]
		switch {
		case next.phase == abandoned:
			r.writes.recycle(next)
		case next.err != nil:
			next.refuse(next.err)
		case r.phase == stopped:
			next.refuse(fmt.Errorf("state: report of node %d not sent: %w", next.node, errNotSeen(stopped)))
		default:
			// next replaces e as e was stored: e may have been judged
			// again since next was queued behind it (overtaken, then
			// sent after the write that beat it), and next's lineage
			// follows from what e became, or the node's stored report
			// would forget the node_epochs e retired. If e did not
			// land, or the watch has applied a write of the node stored
			// after e (another worker's), next replaces the report the
			// watch applied. Against either it may be stale.
			held := &e.lineage
			if !landed || cond > e.seq {
				held = r.watchedLocked(next.node)
			}
			if err := next.judgeLocked(held); err != nil {
				next.refuse(err)
				break
			}
			if landed {
				cond = max(cond, e.seq)
			}
			next.next = after
			next.cond = cond
			next.to(sent)
			return next, cond
		}
		next = after
	}
	return nil, 0
}

// Conflicts counts the reports whose write the store refused
// (ErrConflict) since the Replica was made.
func (r *Replica) Conflicts() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conflicts
}
