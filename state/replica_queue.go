package state

import (
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// Completion is told the outcome of a report given to a Replica (Submit,
// Refuse).
type Completion interface {
	// Complete is called once per report, in the order the reports were
	// given, outside the Replica's locks, from whichever goroutine found
	// the outcome (the store's answer, the watch, the clock, Drain or
	// Run's end). It must return quickly and must not call the Replica.
	Complete(res MergeResult, err error)
}

// queue is this worker's reports in the order they were given: a ring of
// at most Window writes, answered from its head. Its fields are guarded by
// Replica.mu, except answers, which the answering goroutine owns.
type queue struct {
	ring      []*write
	first     int // index of the head in ring
	len       int
	passed    int      // writes from the head that the watch has gone past, or that failed: ownLocked starts after them
	free      []*write // answered writes whose store has answered too, for reuse
	answering bool     // a goroutine is answering: the others leave it their turn
	answers   []answer // the answering goroutine's batch

	// What the writes in flight count against the limits: the flows of
	// each, and the nodes new to the aggregate.
	flowsInFlight  int
	errorsInFlight errorLoad      // the errors of the writes in flight
	newNodes       map[uint64]int // node -> writes in flight of it while new

	// behind is a write whose watch was late: until the watch reaches it,
	// reports are refused at once.
	behind uint64

	// lastOf is each node's last write in the queue: a write of the node
	// submitted while the store has not answered it is chained after it.
	lastOf map[uint64]*write

	// overtaken are the writes whose condition the store refused, waiting
	// for the watch to pass the write that beat them
	// (replica_overtaken.go).
	overtaken []*write
}

// answer is a Completion to call.
type answer struct {
	c   Completion
	res MergeResult
	err error
}

func newQueue(window int) queue {
	return queue{ring: make([]*write, window), newNodes: make(map[uint64]int), lastOf: make(map[uint64]*write)}
}

func (q *queue) head() *write { return q.ring[q.first] }

// push queues a new write of c; the window guarantees room for it.
func (q *queue) push(r *Replica, c Completion) *write {
	var e *write
	if n := len(q.free); n > 0 {
		e, q.free = q.free[n-1], q.free[:n-1]
	} else {
		e = &write{r: r}
	}
	e.to(queued)
	e.c = c
	q.ring[(q.first+q.len)%len(q.ring)] = e
	q.len++
	return e
}

// pop takes the head out, answered: it no longer counts against the
// limits, and is reused unless the store has yet to answer it.
func (q *queue) pop() {
	e := q.head()
	q.ring[q.first] = nil
	q.first = (q.first + 1) % len(q.ring)
	q.len--
	q.passed = max(q.passed-1, 0)
	if q.lastOf[e.node] == e {
		delete(q.lastOf, e.node)
	}
	q.flowsInFlight -= e.counted
	q.errorsInFlight = q.errorsInFlight.minus(e.errors)
	if e.newNode {
		if q.newNodes[e.node]--; q.newNodes[e.node] <= 0 {
			delete(q.newNodes, e.node)
		}
	}
	if e.awaitsStore() {
		e.to(abandoned)
		return
	}
	e.to(answered)
	q.recycle(e)
}

// recycle returns a write that has nothing more to wait for (answered, or
// abandoned and now answered by the store) to the free list.
func (q *queue) recycle(e *write) {
	e.to(free)
	clear(e.value[:cap(e.value)]) // no message outlives the write in its reused buffer
	*e = write{r: e.r, flows: e.flows[:0], value: e.value[:0]}
	q.free = append(q.free, e)
}

// chainLocked makes e, admitted, the node's last write, and chains it
// after the node's write before it if the store has not answered that one
// yet: true if e is to wait for it (chained).
func (q *queue) chainLocked(e *write) bool {
	prev := q.lastOf[e.node]
	q.lastOf[e.node] = e
	if prev == nil || !prev.awaitsStore() {
		return false
	}
	prev.next, e.late = e, true
	e.to(chained)
	return true
}

// keepLocked records the report of e: its flows, to apply when the watch
// delivers its write, counted against the limits while it is in flight
// with the flows its health names and its errors.
func (q *queue) keepLocked(e *write, flows []flowstate.Flow, health []flowstate.FlowHealth, errors errorLoad, countFlows bool, agg *Aggregate) {
	e.errors = errors
	q.errorsInFlight = q.errorsInFlight.plus(errors)
	for _, f := range flows {
		if f.Has != 0 { // flowstate.AppendJSON writes nothing of a flow without fields
			e.flows = append(e.flows, f)
		}
	}
	if countFlows {
		e.counted = countNamed(e.flows, health)
		q.flowsInFlight += e.counted
	}
	if _, ok := agg.NodeFlows(e.node); !ok {
		e.newNode = true
		q.newNodes[e.node]++
	}
}

// admitLocked checks a report before its write: the Replica serves, its
// watch is not late, the report is not stale against the node's report as
// this worker knows it (heldLocked), and the state stays within its
// limits.
func (r *Replica) admitLocked(rep *Report) error {
	if limit := r.opts.MaxReportFlows; limit > 0 {
		if n := countNamed(rep.Flows, healthFlows(keepHealthOf(rep))); n > limit {
			return fmt.Errorf("%w: %d flows, past --max-flows %d", ErrTooManyFlows, n, limit)
		}
	}
	if err := r.checkLocked(); err != nil {
		return err
	}
	if b := r.writes.behind; b > r.watch.delivered {
		return fmt.Errorf("state: the store's watch has not reached revision %d yet: %w", b, kv.ErrUnavailable)
	}
	// The errors, flows and new nodes in flight count as held until their
	// writes are answered: a window of reports, each within the limits by
	// what the watch applied, cannot pass them together.
	id, w := rep.Node, &r.watch
	held := w.errors.plus(r.writes.errorsInFlight)
	if _, err := w.agg.admit(rep, r.heldLocked(id), w.agg.nodes[id], held, loadOf(w.nodes[id].health), r.writes.limitsLocked(r.opts.Limits)); err != nil {
		return err
	}
	return r.writes.checkNewNodeLocked(id, r.opts.Limits.MaxNodes, w.agg)
}

// limitsLocked returns lim less what the writes in flight may add: every
// flow of such a write counts against MaxFlows until it is answered, so
// that a window of reports, each within the limit by what the watch
// applied, cannot take the state past it together. (New nodes in flight
// are counted by checkNewNodeLocked.) A report that adds no flow still
// passes.
func (q *queue) limitsLocked(lim Limits) Limits {
	if lim.MaxFlows > 0 && q.flowsInFlight > 0 {
		lim.MaxFlows = max(lim.MaxFlows-q.flowsInFlight, 1)
	}
	return lim
}

// checkNewNodeLocked refuses a report of a node new to the aggregate if the
// aggregate's nodes and the new nodes whose writes are in flight already
// make maxNodes: Aggregate.Check counts only what the watch applied.
func (q *queue) checkNewNodeLocked(nodeID uint64, maxNodes int, agg *Aggregate) error {
	if maxNodes <= 0 || len(q.newNodes) == 0 {
		return nil
	}
	if _, ok := q.newNodes[nodeID]; ok {
		return nil
	}
	if _, ok := agg.NodeFlows(nodeID); ok {
		return nil
	}
	if nodes, _ := agg.Len(); nodes+len(q.newNodes) >= maxNodes {
		return &CapacityError{Limit: LimitMaxNodes, Max: maxNodes, Would: nodes + len(q.newNodes) + 1}
	}
	return nil
}

// nodeApplied notes that the watch applied a write of node id: it is no
// longer new to the aggregate.
func (q *queue) nodeApplied(id uint64) {
	if len(q.newNodes) > 0 {
		delete(q.newNodes, id)
	}
}

// ownLocked returns this worker's write of node id in epoch stored at seq,
// if the store's answer to it has come, or nil: the watch applies its
// report without a decode. Writes queue in the order the store takes them
// (but for chained ones, sent later) and the watch delivers writes in that
// order, so the search starts after the writes the watch has gone past and
// stops at the first later one that was not chained.
func (q *queue) ownLocked(epoch string, id, seq uint64) *write {
	for i := q.passed; i < q.len; i++ {
		e := q.ring[(q.first+i)%len(q.ring)]
		past := e.err != nil || (e.seq != 0 && e.seq <= seq)
		if past && i == q.passed {
			q.passed++
		}
		switch {
		case e.err != nil || e.seq == 0 || e.epoch != epoch:
			continue // refused, not stored (yet), or another epoch's
		case e.seq > seq && e.late:
			continue // sent after writes queued behind it
		case e.seq > seq:
			return nil
		case e.seq == seq && e.node == id:
			return e
		}
	}
	return nil
}

// failAllLocked answers every write in the queue with err, at once.
func (q *queue) failAllLocked(err error) {
	for i := range q.len {
		if e := q.ring[(q.first+i)%len(q.ring)]; e.err == nil {
			e.err = err
		}
	}
}

// answerReady answers, in order, the reports at the head of the queue
// whose outcome is known. The Completions run outside mu, on one goroutine
// at a time: whichever takes the answering turn answers them and looks
// again until none is ready; a caller that finds another answering leaves
// the answers to it. Every event that may settle a report calls it once it
// has let go of mu.
func (r *Replica) answerReady() {
	for batch := r.takeAnswers(false); len(batch) > 0; batch = r.takeAnswers(true) {
		for i, a := range batch {
			<-r.window
			a.c.Complete(a.res, a.err)
			batch[i] = answer{}
		}
	}
}

// takeAnswers takes, under mu, the answers whose turn has come, with the
// answering turn; holding says the caller has the turn already. It takes
// none when another goroutine has the turn, and gives the turn up when
// none is ready.
func (r *Replica) takeAnswers(holding bool) []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := &r.writes
	if q.answering && !holding {
		return nil
	}
	batch := q.answers[:0]
	for q.len > 0 {
		e := q.head()
		res, err, ok := r.outcomeLocked(e)
		if !ok {
			break
		}
		batch = append(batch, answer{c: e.c, res: res, err: err})
		q.pop() // e may be reused from here
	}
	q.answers = batch
	if holding || len(batch) > 0 {
		r.wait.broadcastLocked() // Drain and stop wait for the queue to empty and the last answer to be given
	}
	q.answering = len(batch) > 0
	return batch
}

// heldLocked is the lineage of node id's report as this worker knows it
// now: its own write of the node in the watch's epoch still in the queue
// and not refused, which is the node's report if it lands (a later write is
// conditioned on it), unless the watch has applied a later write of the
// node's key (another worker's, stored after it); or else the report the
// watch applied; nil if neither. A write of an ended epoch says nothing of
// the node's report in this one.
func (r *Replica) heldLocked(id uint64) *lineage {
	if p := r.writes.lastOf[id]; p != nil && p.err == nil && p.phase != refused && p.epoch == r.watch.epoch && !r.passedLocked(p) {
		return &p.lineage
	}
	return r.watchedLocked(id)
}

// passedLocked reports whether the watch has applied a write of e's node
// key stored after e: the node's report is then that write's, which e's
// lineage knows nothing of, and a write conditioned on it is judged
// against it.
func (r *Replica) passedLocked(e *write) bool {
	return e.phase == stored && e.epoch == r.watch.epoch && r.watch.keys[e.node] > e.seq
}

// watchedLocked is the lineage of node id's report as the watch applied
// it; nil if it applied none.
func (r *Replica) watchedLocked(id uint64) *lineage {
	if seen, ok := r.watch.nodes[id]; ok {
		return &seen.lineage
	}
	return nil
}
