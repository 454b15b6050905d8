package state

import (
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// This file is the lifecycle of one report given to a Replica (a write):
// its phases and the one function that moves it from one to the next
// (to), as replica.go is the Replica's. Two things end a write, in either
// order: its answer (its Completion called, in the reports' order) and the
// store's answer to its put. It is reused once both have come.
//
//	queued    → chained, sent or refused (its check)
//	chained   → sent (the write before it was answered), refused, abandoned
//	sent      → stored, refused, overtaken (its condition refused), abandoned
//	overtaken → sent (the watch passed the write that beat it), stored (that
//	            write was its own first copy), refused, abandoned
//	stored, refused → answered (its turn) → free (reused)
//	abandoned → free (the store, the write before it or the watch answered)
//
// A write's err, once set, is its answer whatever its phase: a stored
// write whose value the rule refuses, or every write when Drain gives up.
// Past its deadline (ApplyTimeout after Submit), or once Run has ended, a
// write is answered whatever it awaits: one that awaits the store is
// abandoned then. A write that is not sent hands the writes chained after
// it on to the judgement (nextLocked), so that every write has an owner:
// the store, the write before it, the watch, or its turn to be answered.

// writePhase is where a write is between Submit (or Refuse) and its reuse.
type writePhase uint8

const (
	// free: in the queue's free list, or not given out yet.
	free writePhase = iota
	// queued: given to the Replica, not checked yet.
	queued
	// chained: waits for the store's answer to its node's write before
	// it, which sends it, or for that write to end without a put
	// (nextLocked); its value is kept until then.
	chained
	// sent: its put is in flight; the store answers it (PutDone).
	sent
	// overtaken: the store refused its put's condition, naming a later write
	// of the node's key that this worker's watch had not applied: it waits
	// for the watch to pass that write, then is sent again (resumeLocked),
	// is found stored (that write was its own first copy), or refused once
	// its deadline has passed.
	overtaken
	// stored: the store took it at seq; it is answered once the watch has
	// applied it, or its deadline passed.
	stored
	// refused: it was not stored (refused before its put, or by the store):
	// err says why, and no answer of the store is awaited.
	refused
	// answered: its Completion is called (or about to be) and the store
	// has nothing more to say: it is reused.
	answered
	// abandoned: answered while its put was in flight or while it was
	// chained; it is reused once the store answers the put, or the write
	// before it is answered.
	abandoned
)

var writePhaseNames = [...]string{free: "free", queued: "queued", chained: "chained", sent: "sent", overtaken: "overtaken",
	stored: "stored", refused: "refused", answered: "answered", abandoned: "abandoned"}

func (p writePhase) String() string { return writePhaseNames[p] }

// moves are the transitions of a write: moves[from] lists where it may go.
var moves = [...][]writePhase{
	free:      {queued},
	queued:    {chained, sent, refused},
	chained:   {sent, refused, abandoned},
	sent:      {stored, refused, overtaken, abandoned},
	overtaken: {sent, stored, refused, abandoned},
	stored:    {answered},
	refused:   {answered},
	answered:  {free},
	abandoned: {free},
}

// write is a report of this worker between Submit and its answer.
type write struct {
	r     *Replica
	phase writePhase
	c     Completion

	node      uint64
	nodeEpoch uint64 // the report's node_epoch, if hasEpoch
	hasEpoch  bool
	health    *flowstate.Health // the report's v3 part, copied; nil without one
	lineage   lineage           // the node's lineage once this report is its report
	epoch     string            // the watch's at Submit
	delivered uint64            // the watch's at Submit: a write stored at or below it went to a recreated bucket
	rev       uint64            // the served revision at Submit, for MergeResult.Changed
	flows     []flowstate.Flow  // the report: what the watch applies when it delivers seq
	counted   int               // flows counted against Limits.MaxFlows while in flight
	newNode   bool              // its node was new to the aggregate: counted against Limits.MaxNodes
	errors    errorLoad         // its errors, counted against Limits.MaxErrorBytes and MaxErrors while in flight

	seq      uint64 // the write's sequence number, once stored
	deadline uint64 // the clock tick past which it is answered, whatever its phase: ApplyTimeout after Submit
	err      error  // why it is not acknowledged
	cond     uint64 // the node key's last write its put is conditioned on
	waitFor  uint64 // overtaken: the write of the node's key that beat it

	// A write of a node whose previous write from this worker is not
	// answered by the store yet waits for that answer: next links them, and
	// the one that waits keeps its value until it is sent. late marks a
	// write sent that way, out of the queue's order.
	next  *write
	late  bool
	value []byte
}

// to moves e to phase p. Every change of a write's phase goes through it,
// and a move that the lifecycle does not have is a bug: it panics.
func (e *write) to(p writePhase) {
	for _, q := range moves[e.phase] {
		if q == p {
			e.phase = p
			return
		}
	}
	panic(fmt.Sprintf("state: a write of node %d moved from %s to %s", e.node, e.phase, p))
}

// awaitsStore reports whether the store, the write before e or the watch
// has yet to answer e: what keeps an answered write from being reused.
func (e *write) awaitsStore() bool {
	return e.phase == chained || e.phase == sent || e.phase == overtaken
}

// refuse answers e with err at its turn: before its put, instead of it, or
// as the store's refusal.
func (e *write) refuse(err error) {
	e.err = err
	e.to(refused)
}

// report is e's report, for the stale rule.
func (e *write) report() Report {
	return Report{Node: e.node, NodeEpoch: e.nodeEpoch, HasNodeEpoch: e.hasEpoch, Health: e.health}
}

// judgeLocked decides e against held, the lineage of the node's report it
// is to replace: a *StaleError if e is stale, or nil, e's lineage then
// following from held and its value to be encoded again.
func (e *write) judgeLocked(held *lineage) error {
	rep := e.report()
	if err := held.stale(e.node, &rep); err != nil {
		return err
	}
	e.lineage = held.after(&rep)
	e.keepRetired()
	e.value = e.value[:0]
	return nil
}

// keepRetired gives e's value its lineage's retired epochs, even a value
// without v3 fields: it then carries them after GreptimeDB's value.
func (e *write) keepRetired() {
	if e.health == nil && len(e.lineage.retired) > 0 {
		e.health = &flowstate.Health{}
	}
	if e.health != nil {
		e.health.RetiredEpochs = e.lineage.retired
	}
}

// appendValue appends e's stored value: GreptimeDB's JSON of its flows,
// and its v3 fields after it, if it has any.
func (e *write) appendValue(dst []byte) []byte {
	return flowstate.AppendNodeJSON(dst, e.flows, e.nodeEpoch, e.hasEpoch, e.health)
}

// PutDone is the store's answer to e's put (kv.PutReceiver).
func (e *write) PutDone(rev kv.Revision, err error) { e.r.onStored(e, rev, err) }

var _ kv.PutReceiver = (*write)(nil)
