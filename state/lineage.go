package state

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
)

// ErrStale is wrapped by the error of a report that is stale (a
// *StaleError): a later report of the same process, or of a later process
// of the node, is held already. Nothing changes.
var ErrStale = errors.New("state: stale report")

// StaleError says why a report is stale: the report's node_epoch and seq,
// and those the state holds for its node.
type StaleError struct {
	Node           uint64
	Epoch, Seq     uint64 // the report's
	HeldEpoch      uint64 // the held report's node_epoch, if HasHeldEpoch
	HeldSeq        uint64 // the held report's seq, if HasHeldSeq
	HasHeldEpoch   bool
	HasHeldSeq     bool
	RetiredByLater bool // the report's node_epoch is one the node moved away from
}

func (e *StaleError) Error() string {
	held := "no node_epoch"
	if e.HasHeldEpoch {
		held = fmt.Sprintf("node_epoch %d", e.HeldEpoch)
		if e.HasHeldSeq {
			held += fmt.Sprintf(" seq %d", e.HeldSeq)
		} else {
			held += " without seq"
		}
	}
	if e.RetiredByLater {
		return fmt.Sprintf("stale report of node %d: node_epoch %d seq %d is a process the node moved away from (the state holds %s)",
			e.Node, e.Epoch, e.Seq, held)
	}
	return fmt.Sprintf("stale report of node %d: node_epoch %d seq %d, the state holds %s", e.Node, e.Epoch, e.Seq, held)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }

// lineage is what a state holds of a node's processes: the node_epoch and
// seq of its held report, and the node_epoch values it moved away from,
// oldest first.
type lineage struct {
	epoch    uint64
	seq      uint64
	hasEpoch bool
	hasSeq   bool
	retired  []uint64
}

// after is the lineage of a node once rep is applied, prev being the one
// before (nil: the node held no report): rep's node_epoch and seq (a seq
// only with a node_epoch: alone it orders nothing), and the retired
// node_epochs, with prev's retired if rep changes it, less rep's if it
// comes back.
//
// Every state holds what the store can hold, so that both backends and
// every worker judge the node's next report alike, and a report without v3
// fields is stored as GreptimeDB's value alone unless the node has
// node_epochs to remember as retired: then its lineage is its node_epoch
// (if any) and those, and otherwise none. So no unnumbered report erases
// the node's earlier processes.
func (prev *lineage) after(rep *Report) lineage {
	var next lineage
	if rep.HasNodeEpoch {
		next.epoch, next.hasEpoch = rep.NodeEpoch, true
		next.seq, next.hasSeq = rep.seq()
	}
	if prev != nil {
		next.retired = prev.retired
		if prev.hasEpoch && (!rep.HasNodeEpoch || rep.NodeEpoch != prev.epoch) {
			next.retired = retire(next.retired, prev.epoch)
		}
		if rep.HasNodeEpoch {
			if i := slices.Index(next.retired, rep.NodeEpoch); i >= 0 {
				next.retired = slices.Delete(slices.Clone(next.retired), i, i+1) // it comes back
			}
		}
	}
	if !rep.carriesV3() && len(next.retired) == 0 {
		return lineage{} // stored byte for byte: GreptimeDB's value alone
	}
	return next
}

// retire appends epoch to retired, oldest dropped past flowstate.MaxRetiredEpochs;
// retired is not changed in place.
func retire(retired []uint64, epoch uint64) []uint64 {
	out := make([]uint64, 0, min(len(retired)+1, flowstate.MaxRetiredEpochs))
	for _, e := range retired {
		if e != epoch {
			out = append(out, e)
		}
	}
	out = append(out, epoch)
	if n := len(out) - flowstate.MaxRetiredEpochs; n > 0 {
		out = out[n:]
	}
	return out
}

// stale returns a *StaleError if rep, of node, is stale against the held
// lineage l (nil: the node holds no report): rep carries node_epoch and
// seq, and the held report has the same node_epoch and a seq at least as
// great, or rep's node_epoch is retired. Any other report is not stale.
func (l *lineage) stale(node uint64, rep *Report) error {
	seq, hasSeq := rep.seq()
	if l == nil || !rep.HasNodeEpoch || !hasSeq {
		return nil
	}
	e := &StaleError{Node: node, Epoch: rep.NodeEpoch, Seq: seq,
		HeldEpoch: l.epoch, HeldSeq: l.seq, HasHeldEpoch: l.hasEpoch, HasHeldSeq: l.hasSeq}
	switch {
	case l.hasEpoch && l.epoch == rep.NodeEpoch && l.hasSeq && l.seq >= seq:
		return e
	case slices.Contains(l.retired, rep.NodeEpoch):
		e.RetiredByLater = true
		return e
	}
	return nil
}
