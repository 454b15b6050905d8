package state

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"

	"github.com/flowstate-io/flowstate/kv"
)

// A node-key write is conditional on the key's last write as this worker
// knows it. When another worker wrote the key meanwhile (the node's
// reports reach both, faster than their watches pass each other's
// writes), the store refuses it and names the write that beat it. Such a
// write is not answered 503 at once: it waits (overtaken) until this
// worker's watch has passed that write, and is then sent again,
// conditioned on it; refused again (another write of the node beat it
// meanwhile), it waits again. Until its deadline (ApplyTimeout after
// Submit): past it, it is answered ErrConflict.

// overtakeLocked moves e, whose put the store answered with err, to
// overtaken if err is a refusal of its condition, and its deadline has
// not passed: true if it did. It waits for the key's
// last write that the refusal names, or, when it names none (a replicated
// stream's), for any write of the key past e's condition.
func (r *Replica) overtakeLocked(e *write, err error) bool {
	if err == nil || r.phase == stopped || e.epoch != r.watch.epoch || r.clock > e.deadline {
		return false
	}
	if !errors.Is(err, kv.ErrRevisionMismatch) {
		return false
	}
	last, ok := kv.LastWriteOf(err)
	if !ok {
		// A replicated stream's refusal does not name the key's last
		// write: any write of the key past the one it was conditioned on.
		last = e.cond + 1
	}
	e.waitFor = last
	e.to(overtaken)
	r.writes.overtaken = append(r.writes.overtaken, e)
	return true
}

// resumeLocked sends e, overtaken, once more: the watch has passed the
// write that beat it, so it is conditioned on the key's last write as the
// watch knows it now, and judged against the report the watch applied: a
// report the write that beat it makes stale is refused (false). If the
// write that beat it is e's own report (storedCopyLocked), e is stored
// there: nothing is sent again, and the write chained after it, if any,
// is returned instead.
func (r *Replica) resumeLocked(e *write) (resend, bool) {
	r.writes.dropOvertaken(e)
	if seq, ok := r.storedCopyLocked(e); ok {
		e.seq = seq
		e.to(stored)
		next, cond := r.nextLocked(e)
		return resend{e: next, cond: cond}, next != nil
	}
	if err := e.judgeLocked(r.watchedLocked(e.node)); err != nil {
		e.refuse(err)
		return resend{}, false
	}
	e.late = true // sent after writes queued behind it
	e.cond = r.watch.keys[e.node]
	e.to(sent)
	return resend{e: e, cond: e.cond}, true
}

// sweepOvertakenLocked settles the overtaken writes that can be: those
// whose write the watch has passed are sent again; those past their
// deadline, of an ended epoch, or left after Run ended are refused; those
// answered meanwhile (abandoned) are reused. What is to be sent, the
// writes chained after those that end among it, goes to the sender.
func (r *Replica) sweepOvertakenLocked() {
	q := &r.writes
	if len(q.overtaken) == 0 {
		return
	}
	for _, e := range append([]*write(nil), q.overtaken...) {
		var reason error
		switch {
		case e.phase == abandoned:
		case e.epoch != r.watch.epoch:
			reason = fmt.Errorf("%w (epoch %s ended)", ErrStoreCleared, e.epoch)
		case r.watch.keys[e.node] >= e.waitFor && r.phase != stopped:
			if s, ok := r.resumeLocked(e); ok {
				r.postLocked(s)
				continue
			}
			// Stale: refused by resumeLocked; the writes chained after it
			// are judged in turn.
			if next, cond := r.nextLocked(e); next != nil {
				r.postLocked(resend{e: next, cond: cond})
			}
			continue
		case r.phase == stopped, r.clock > e.deadline:
			r.conflicts++
			reason = fmt.Errorf("state: report of node %d not stored: %w (the watch did not reach revision %d in time)",
				e.node, ErrConflict, e.waitFor)
		default:
			continue
		}
		q.dropOvertaken(e)
		if next, cond := r.nextLocked(e); next != nil {
			r.postLocked(resend{e: next, cond: cond})
		}
		if e.phase == abandoned {
			q.recycle(e)
		} else {
			e.refuse(reason)
		}
	}
}

// storedCopyLocked reports whether the node's report as the watch applied
// it, written after e's condition, is e's own numbered report (the same
// node_epoch, seq and flows), and at which sequence number. A refusal does not
// always mean that nothing was stored: around a stream leader's change,
// a server that still takes itself for the leader may refuse a put by its
// own stale view while the new leader stores it. Sent again, such a write
// would be judged stale against its own first copy (a report answered
// 409 that the state holds) or, for a report that is not stale against
// itself, stored twice and acknowledged at the second copy. An
// unnumbered report carries nothing that tells its copy from another
// report's equal value: it is sent again.
func (r *Replica) storedCopyLocked(e *write) (uint64, bool) {
	seen, ok := r.watch.nodes[e.node]
	if !ok || seen.revision <= e.cond || !e.hasEpoch || e.health == nil || !e.health.HasSeq {
		return 0, false
	}
	l := seen.lineage
	if !l.hasEpoch || !l.hasSeq || l.epoch != e.nodeEpoch || l.seq != e.health.Seq {
		return 0, false
	}
	var flows []flowstate.Flow
	if n, ok := r.watch.agg.nodes[e.node]; ok {
		flows = n.flows
	}
	if !slices.Equal(flows, e.flows) {
		return 0, false // another report under the same numbers: judged as one
	}
	return seen.revision, true
}

// dropOvertaken takes e out of the overtaken writes.
func (q *queue) dropOvertaken(e *write) {
	for i, o := range q.overtaken {
		if o == e {
			q.overtaken = append(q.overtaken[:i], q.overtaken[i+1:]...)
			return
		}
	}
}
