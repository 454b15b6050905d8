package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flowstate-io/flowstate/kv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// DefaultWindow is ReplicaOptions.Window's default.
const DefaultWindow = 256

// AsyncPutter is a shared store that takes a put without waiting for it
// to be stored (package kv/jetstream's Store). A Replica of a store without
// it puts synchronously in Submit.
type AsyncPutter interface {
	// PutAsync sends a put of key and calls done once, from any goroutine,
	// with the write's revision, or an error wrapping kv.ErrUnavailable
	// when it was not stored or its outcome is unknown. Puts are stored in
	// the order of the calls, never retried, and done comes within a
	// bounded time. PutAsync may block while too many puts are in flight,
	// until ctx ends. When it returns an error, nothing was sent and done
	// is not called. value is not retained once PutAsync has returned.
	PutAsync(ctx context.Context, key string, value []byte, done func(kv.Revision, error)) error
}

// Pending is a node's report submitted by Replica.Submit: Wait for its
// outcome, then Release it. A Pending is not safe for concurrent use.
type Pending struct {
	r         *Replica
	nodeID    uint64
	epoch     string
	watermark uint64 // the watch's at submission
	rev       uint64 // the served revision at submission
	own       *ownWrite
	ownGen    uint64
	buf       []byte // the value written

	stored   chan struct{} // one token once seq or err is set
	seq      uint64
	err      error
	done     bool                     // the token was taken
	onStored func(kv.Revision, error) // p.storedCallback, bound once
}

// ownWrite is a node-key write of this worker that its watch has not
// delivered yet: the watch applies the retained flows when it delivers the
// same bytes, without decoding them.
type ownWrite struct {
	gen   uint64 // changes whenever the record is reused
	seq   uint64 // the write's sequence number, once stored (0 before)
	value []byte
	flows []flowstate.Flow
	// counted is how many flows the write holds against
	// Limits.MaxFlows while it is in flight (Replica.ownFlows).
	counted int
}

var pendingPool = sync.Pool{New: func() any {
	p := &Pending{stored: make(chan struct{}, 1)}
	p.onStored = p.storedCallback
	return p
}}

// Window is how many writes the worker keeps in flight
// (ReplicaOptions.Window): the size of its intake pipeline.
func (r *Replica) Window() int { return r.opts.Window }

// Submit checks a node's report (flows sorted by ID, each ID once:
// ErrUnsortedFlows otherwise; a *CapacityError if it would take this
// replica's state, as its watch made it, past ReplicaOptions.Limits) and
// sends its write to the node's key without waiting for the store. Wait on
// the Pending tells when the report is stored and applied by this worker's
// watch, as MergeFlows does. Submit may block while the store has too
// many writes in flight, until ctx ends. Writes are stored in the order of
// the Submit calls. flows is not retained.
func (r *Replica) Submit(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (*Pending, error) {
	if err := checkSorted(flows); err != nil {
		return nil, err
	}
	p := pendingPool.Get().(*Pending)
	p.r, p.nodeID, p.seq, p.err, p.done = r, nodeID, 0, nil, false
	p.buf = flowstate.AppendJSON(p.buf[:0], flows)
	r.mu.Lock()
	err := r.checkLocked()
	if err == nil {
		err = r.behindLocked()
	}
	if err == nil {
		err = r.agg.Check(nodeID, flows, r.inFlightLimitsLocked())
	}
	if err == nil {
		err = r.checkNewNodesLocked(nodeID)
	}
	if err != nil {
		r.mu.Unlock()
		p.done = true
		p.Release()
		return nil, err
	}
	p.epoch, p.watermark, p.rev = r.epoch, r.watermark, r.rev
	p.own = r.rememberLocked(nodeID, p.buf, flows)
	p.ownGen = p.own.gen
	r.mu.Unlock()

	if ap, ok := r.store.(AsyncPutter); ok {
		if err := ap.PutAsync(ctx, flowstate.NodeKey(nodeID), p.buf, p.onStored); err != nil {
			p.forget()
			p.done = true
			p.Release()
			return nil, fmt.Errorf("flowstate: store report of node %d: %w", nodeID, err)
		}
		return p, nil
	}
	rev, err := r.store.Put(ctx, flowstate.NodeKey(nodeID), p.buf)
	p.storedCallback(rev, err)
	return p, nil
}

// storedCallback is the store's answer to the write.
func (p *Pending) storedCallback(rev kv.Revision, err error) {
	p.seq, p.err = rev.Seq, err
	if err != nil {
		p.forget()
	} else {
		p.r.mu.Lock()
		if p.own.gen == p.ownGen {
			p.own.seq = rev.Seq
		}
		p.r.mu.Unlock()
	}
	p.stored <- struct{}{}
}

// forget drops the write from what the watch expects of this worker.
func (p *Pending) forget() {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.own.gen != p.ownGen {
		return // the watch has taken it, or started over
	}
	q := r.own[p.nodeID]
	for i, w := range q {
		if w == p.own {
			q = append(q[:i], q[i+1:]...)
			r.own[p.nodeID] = q
			r.freeOwnLocked(w)
			if len(q) == 0 {
				delete(r.ownNew, p.nodeID)
			}
			return
		}
	}
}

// inFlightLimitsLocked returns ReplicaOptions.Limits less what this
// worker's writes in flight may add: every flow of such a write counts
// against MaxFlows until the watch has applied it or it failed, so that a
// window of reports, each within the limit by what the watch applied,
// cannot take the state past it together. (Nodes in flight are counted by
// checkNewNodesLocked.) A report that adds no flow still passes.
func (r *Replica) inFlightLimitsLocked() Limits {
	lim := r.opts.Limits
	if lim.MaxFlows > 0 && r.ownFlows > 0 {
		lim.MaxFlows = max(lim.MaxFlows-r.ownFlows, 1)
	}
	return lim
}

// checkNewNodesLocked refuses a report of a node new to the aggregate if
// the nodes of the aggregate and the new nodes whose writes are in flight
// already make ReplicaOptions.Limits.MaxNodes: Check counts only what the
// watch applied.
func (r *Replica) checkNewNodesLocked(nodeID uint64) error {
	limit := r.opts.Limits.MaxNodes
	if limit <= 0 || len(r.ownNew) == 0 {
		return nil
	}
	if _, ok := r.ownNew[nodeID]; ok {
		return nil
	}
	if _, ok := r.agg.NodeFlows(nodeID); ok {
		return nil
	}
	if nodes, _ := r.agg.Len(); nodes+len(r.ownNew) >= limit {
		return &CapacityError{Limit: LimitMaxNodes, Max: limit, Would: nodes + len(r.ownNew) + 1}
	}
	return nil
}

// Wait waits until the report is stored and this worker's watch has
// applied it, and returns the result as MergeFlows does; an error wrapping
// kv.ErrUnavailable if the store did not take it or its outcome is
// unknown, or if the watch does not apply it within ApplyTimeout.
func (p *Pending) Wait(ctx context.Context) (MergeResult, error) {
	if !p.done {
		select {
		case <-p.stored:
			p.done = true
		case <-ctx.Done():
			return MergeResult{}, fmt.Errorf("flowstate: report of node %d: %w: %w", p.nodeID, kv.ErrUnavailable, ctx.Err())
		}
	}
	if p.err != nil {
		return MergeResult{}, fmt.Errorf("flowstate: store report of node %d: %w", p.nodeID, p.err)
	}
	if p.seq <= p.watermark {
		// A new write below what the watch has seen: the bucket was
		// recreated under us, and the watch is about to start over.
		return MergeResult{}, fmt.Errorf("%w (revision %d went back below %d)", ErrStoreCleared, p.seq, p.watermark)
	}
	if res, ok := p.applied(); ok {
		return res, nil
	}
	res, err := p.r.awaitApplied(ctx, p.epoch, p.seq, p.rev)
	if err != nil && !errors.Is(err, ErrStoreCleared) {
		return MergeResult{}, fmt.Errorf("flowstate: report of node %d stored at revision %d, not seen by the watch: %w", p.nodeID, p.seq, err)
	}
	return res, err
}

// applied returns the result at once if the watch has applied the write
// already, as it often has by the time the completion stage looks: no
// timer, no wait.
func (p *Pending) applied() (MergeResult, bool) {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch != p.epoch || !r.servedLocked(p.seq) {
		return MergeResult{}, false
	}
	return r.resultLocked(p.epoch, p.seq, p.rev), true
}

// Release returns p to its pool once the store has answered (the store
// answers within a bounded time). p must not be used after.
func (p *Pending) Release() {
	if !p.done {
		<-p.stored
	}
	p.r, p.own, p.err = nil, nil, nil
	pendingPool.Put(p)
}

// rememberLocked records a write of this worker, so that the watch applies
// flows when it delivers value.
func (r *Replica) rememberLocked(nodeID uint64, value []byte, flows []flowstate.Flow) *ownWrite {
	var w *ownWrite
	if n := len(r.ownFree); n > 0 {
		w = r.ownFree[n-1]
		r.ownFree = r.ownFree[:n-1]
	} else {
		w = &ownWrite{}
	}
	w.seq = 0
	w.value = append(w.value[:0], value...)
	w.flows = w.flows[:0]
	for _, f := range flows {
		if f.Has != 0 { // AppendJSON writes nothing of a flow without fields
			w.flows = append(w.flows, f)
		}
	}
	if r.opts.Limits.MaxFlows > 0 {
		w.counted = len(w.flows)
		r.ownFlows += w.counted
	}
	r.own[nodeID] = append(r.own[nodeID], w)
	if _, ok := r.agg.NodeFlows(nodeID); !ok {
		r.ownNew[nodeID] = struct{}{}
	}
	return w
}

func (r *Replica) freeOwnLocked(w *ownWrite) {
	r.ownFlows -= w.counted
	w.counted = 0
	w.gen++
	r.ownFree = append(r.ownFree, w)
}

// ownFlowsLocked returns the flows of this worker's write of node id whose
// bytes are value, if it has one, and forgets it with the writes of that
// node that came before it or that the watch skipped. The flows are valid
// until the next call.
func (r *Replica) ownFlowsLocked(id uint64, value []byte, seq uint64) ([]flowstate.Flow, bool) {
	q := r.own[id]
	if len(q) == 0 {
		return nil, false
	}
	match := -1
	for i, w := range q {
		if bytes.Equal(w.value, value) {
			match = i
			break
		}
	}
	var flows []flowstate.Flow
	if match >= 0 {
		flows = append(r.spare[:0], q[match].flows...)
		r.spare = flows
	}
	kept := q[:0]
	for i, w := range q {
		if i <= match || (w.seq != 0 && w.seq <= seq) {
			r.freeOwnLocked(w)
			continue
		}
		kept = append(kept, w)
	}
	clear(q[len(kept):])
	r.own[id] = kept
	if len(kept) == 0 {
		delete(r.ownNew, id)
	}
	return flows, match >= 0
}

// forgetOwnLocked forgets every write of this worker: the watch starts
// over.
func (r *Replica) forgetOwnLocked() {
	for id, q := range r.own {
		for _, w := range q {
			r.freeOwnLocked(w)
		}
		clear(q)
		r.own[id] = q[:0]
	}
	clear(r.ownNew)
}
