package state

import (
	"cmp"
	"iter"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
)

// Aggregate is every node's last report and, per flow, the per-field max over
// the nodes that report it. It is the data structure that Manager and Replica
// share: no lock, no store, no clock. Its cost per report grows with the
// report and the one it replaces, and at most logarithmically with the
// number of nodes that share a flow. It is not safe for concurrent use. It
// records which flows' entries changed, for deltas (TakeChanges).
type Aggregate struct {
	nodes map[uint64]*aggNode
	flows map[flowstate.FlowID]*aggFlow
	order []*aggFlow // flows sorted by ID, when !stale
	stale bool       // the set of flow ids changed since order was built

	// Scratch space reused by Apply so that a steady stream of reports
	// does not allocate.
	spareFlows []flowstate.Flow
	spareAggs  []*aggFlow
	spareSlots []int32
	free       []*aggFlow // removed entries, for reuse
	spareNames [2][]flowName

	// named counts the flows the nodes name in their health
	// (aggregate_named.go).
	named namedFlows

	changes changeLog
}

// aggNode is one node's last report.
type aggNode struct {
	flows []flowstate.Flow // sorted by ID, each with a field present
	aggs  []*aggFlow       // aggs[i] is the entry of flows[i]
	slots []int32          // slots[i] is this node's index in aggs[i].contribs
	// health is the flows its last report names in processed_rows or
	// last_errors, sorted by ID: the state's kept copy, never changed.
	health []flowstate.FlowHealth
	meta   *nodeMeta // what a Manager keeps of the node; nil in a Replica
}

// aggFlow is one flow of the aggregate: every node's contribution to it and
// their per-field max. With few contributors (the common case: a flow runs
// on one flownode) the max is recomputed by a scan; with more, one max-heap
// per field keeps it in O(log k) per update.
//
// The fields a merge reads come first, the heaps (used only past
// smallContribs contributors) last.
type aggFlow struct {
	agg      flowstate.Flow
	contribs []contrib
	large    bool
	mark     uint32 // recorded in changes if equal to changes.gen
	first    [1]contrib
	heaps    [numFields][]int32 // indexes into contribs; maintained when large
}

type contrib struct {
	node *aggNode
	flow flowstate.Flow
	pos  [numFields]int32 // position in heaps[f], -1 if absent; when large
}

const (
	numFields = 3
	// A flow switches to heaps past smallContribs contributors, and back
	// at half of it.
	smallContribs = 8
	// maxFree bounds the removed entries kept for reuse.
	maxFree = 1024
	// minRecord is the least number of changes recorded between two
	// takes, whatever the limit of the last take.
	minRecord = 1024
)

var fieldBits = [numFields]flowstate.Fields{flowstate.HasStateSize, flowstate.HasLastExecTime, flowstate.HasStartTime}

// changeLog records the flows whose entries changed since the last take.
//
// An entry is marked as recorded by its mark equal to gen; a take or a reset
// unmarks every entry at once by moving gen on, so a resync (most flows
// changed) costs nothing per flow. The mark is 32 bits so that an entry
// stays 208 bytes, within the allocator's size class.
type changeLog struct {
	ids   []flowstate.FlowID // may hold an id twice (a flow that left and came back)
	left  int                // flows that left since the last take: ids holds at most left duplicates
	over  bool               // more changed than limit
	limit int                // the limit of the last take; 0 before the first
	gen   uint32             // the current mark; never 0, the mark of an entry never recorded
}

// NewAggregate returns an empty aggregate.
func NewAggregate() *Aggregate {
	return &Aggregate{nodes: make(map[uint64]*aggNode), flows: make(map[flowstate.FlowID]*aggFlow), changes: changeLog{gen: 1}}
}

// Len returns the number of nodes (those whose last report is empty
// included) and of flows in the aggregate.
func (a *Aggregate) Len() (nodes, flows int) { return len(a.nodes), len(a.flows) }

// NodeFlows returns the number of flows in a node's last report, and whether
// the aggregate holds the node.
func (a *Aggregate) NodeFlows(nodeID uint64) (int, bool) {
	if n, ok := a.nodes[nodeID]; ok {
		return len(n.flows), true
	}
	return 0, false
}

// Nodes iterates over the nodes, in no order, with the flows of each one's
// last report, sorted by ID: the aggregate's own, which must not change meanwhile.
func (a *Aggregate) Nodes() iter.Seq2[uint64, []flowstate.Flow] {
	return func(yield func(uint64, []flowstate.Flow) bool) {
		for id, n := range a.nodes {
			if !yield(id, n.flows) {
				return
			}
		}
	}
}

// Apply replaces the last report of nodeID with flows, which must be sorted
// by ID, each ID once; flows with no field present are left out. An empty
// report keeps the node, with no flows. It does not retain flows, and
// reports whether the aggregate changed. The report has no v3 fields: the
// node names no flow in its health any more.
func (a *Aggregate) Apply(nodeID uint64, flows []flowstate.Flow) (changed bool) {
	_, changed = a.applyNode(nodeID, a.nodes[nodeID], flows, nil)
	return changed
}

// applyNode is Apply of node n, the aggregate's entry of nodeID, or nil if
// it holds none, whose report names health in its v3 maps (retained: it
// must not change); it returns the node's entry.
func (a *Aggregate) applyNode(nodeID uint64, n *aggNode, flows []flowstate.Flow, health []flowstate.FlowHealth) (*aggNode, bool) {
	if n == nil {
		n = &aggNode{}
		a.nodes[nodeID] = n
	}
	changed := a.replace(n, flows)
	a.setHealth(n, health)
	return n, changed
}

// Remove forgets nodeID and its flows (an eviction), and reports whether
// the aggregate changed.
func (a *Aggregate) Remove(nodeID uint64) (changed bool) {
	n := a.nodes[nodeID]
	if n == nil {
		return false
	}
	changed = a.replace(n, nil)
	a.setHealth(n, nil)
	delete(a.nodes, nodeID)
	return changed
}

// Reset forgets every node, every flow and the recorded changes.
func (a *Aggregate) Reset() {
	clear(a.nodes)
	clear(a.flows)
	clear(a.named.nodes)
	a.named.extra = 0
	clear(a.order)
	a.order = a.order[:0]
	a.stale = true
	a.changes.ids = a.changes.ids[:0]
	a.changes.left = 0
	a.changes.over = false
	a.nextGen()
}

// nextGen unmarks every entry by moving the change log's generation on.
// Once in 2^32 takes the generation wraps, and the marks are cleared one by
// one, so that a mark left from 2^32 takes ago never counts as recorded.
func (a *Aggregate) nextGen() {
	if a.changes.gen++; a.changes.gen != 0 {
		return
	}
	for _, e := range a.flows {
		e.mark = 0
	}
	a.changes.gen = 1
}

// AppendFlows appends the aggregate to dst, sorted by ID. The order is
// rebuilt (n log n) only when the set of flow ids has changed.
func (a *Aggregate) AppendFlows(dst []flowstate.Flow) []flowstate.Flow {
	if a.stale {
		a.order = a.order[:0]
		for _, e := range a.flows {
			a.order = append(a.order, e)
		}
		slices.SortFunc(a.order, func(x, y *aggFlow) int { return cmp.Compare(x.agg.ID, y.agg.ID) })
		a.stale = false
	}
	for _, e := range a.order {
		dst = append(dst, e.agg)
	}
	return dst
}

// replace moves node n's contributions from its last report to incoming. It
// touches only the flows of the two reports.
func (a *Aggregate) replace(n *aggNode, incoming []flowstate.Flow) bool {
	old := n.flows
	flows, aggs, slots := a.spareFlows[:0], a.spareAggs[:0], a.spareSlots[:0]
	changed := false
	i, j := 0, 0
	for i < len(old) || j < len(incoming) {
		var f flowstate.Flow
		if j < len(incoming) {
			if f = canonical(incoming[j]); f.Has == 0 {
				j++
				continue
			}
		}
		switch {
		case j == len(incoming) || (i < len(old) && old[i].ID < f.ID):
			changed = a.leave(n.aggs[i], n.slots[i]) || changed
			i++
		case i < len(old) && old[i].ID == f.ID:
			e, s := n.aggs[i], n.slots[i]
			if old[i] != f && e.set(s, &f) {
				a.record(e)
				changed = true
			}
			flows, aggs, slots = append(flows, f), append(aggs, e), append(slots, s)
			i++
			j++
		default:
			e, s, c := a.join(n, f)
			changed = c || changed
			flows, aggs, slots = append(flows, f), append(aggs, e), append(slots, s)
			j++
		}
	}
	clear(n.aggs) // do not keep removed entries alive
	n.flows, a.spareFlows = flows, n.flows[:0]
	n.aggs, a.spareAggs = aggs, n.aggs[:0]
	n.slots, a.spareSlots = slots, n.slots[:0]
	return changed
}

// join adds node n's contribution f to its flow's entry, creating it.
func (a *Aggregate) join(n *aggNode, f flowstate.Flow) (*aggFlow, int32, bool) {
	e := a.flows[f.ID]
	if e != nil {
		s := e.add(n, f)
		c := e.recompute()
		if c {
			a.record(e)
		}
		return e, s, c
	}
	if k := len(a.free); k > 0 {
		e, a.free[k-1] = a.free[k-1], nil
		a.free = a.free[:k-1]
	} else {
		e = &aggFlow{}
		e.contribs = e.first[:0:1]
	}
	e.agg = f
	s := e.add(n, f)
	a.flows[f.ID] = e
	a.joined(f.ID)
	a.stale = true
	a.record(e)
	return e, s, true
}

// leave removes the contribution at slot from e, and e from the aggregate
// if it was the last one.
func (a *Aggregate) leave(e *aggFlow, slot int32) bool {
	e.remove(slot)
	if len(e.contribs) > 0 {
		c := e.recompute()
		if c {
			a.record(e)
		}
		return c
	}
	a.record(e)
	a.changes.left++ // e's id may be recorded again if the flow comes back
	delete(a.flows, e.agg.ID)
	a.left(e.agg.ID)
	a.stale = true
	e.mark = 0
	if len(a.free) < maxFree {
		a.free = append(a.free, e)
	}
	return true
}

// canonical returns f with its absent fields zero, so that equal flows
// compare equal.
func canonical(f flowstate.Flow) flowstate.Flow {
	const all = flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime
	if f.Has == all {
		// A flow with every field, as a flood's are, is copied whole: the
		// byte store of Has below, read back as part of a wider load, costs
		// a stalled store-to-load forward on every flow of every report.
		return f
	}
	f.Has &= all
	if f.Has&flowstate.HasStateSize == 0 {
		f.StateSize = 0
	}
	if f.Has&flowstate.HasLastExecTime == 0 {
		f.LastExecTime = 0
	}
	if f.Has&flowstate.HasStartTime == 0 {
		f.StartTime = 0
	}
	return f
}

// record notes that e's entry changed.
func (a *Aggregate) record(e *aggFlow) {
	c := &a.changes
	if e.mark == c.gen || c.over {
		return
	}
	if len(c.ids) >= max(c.limit, minRecord) {
		c.over = true
		return
	}
	e.mark = c.gen
	c.ids = append(c.ids, e.agg.ID)
}

// TakeChanges appends to dst[:0] every flow whose aggregate entry changed
// since the last take (or Reset), sorted by ID, with its entry now; a flow
// that left has no field present. It returns false, and dst empty, if more
// than limit changed: the caller then resends the whole aggregate. Either way
// the record starts over. Its cost grows with the number of flows changed.
// The record keeps at most the limit of the previous take, and at least
// 1,024, changes (so that it stays bounded when nobody takes it): past
// that, the next take returns false whatever its limit.
func (a *Aggregate) TakeChanges(dst []flowstate.Flow, limit int) ([]flowstate.Flow, bool) {
	dst = dst[:0]
	c := &a.changes
	// An id is recorded twice only if its flow left in between, so more
	// than limit+left ids are more than limit flows: a resync, decided
	// without sorting the record (under a flood most flows change).
	ok := !c.over && len(c.ids)-c.left <= limit
	if ok && len(c.ids) > 1 {
		slices.Sort(c.ids)
		c.ids = slices.Compact(c.ids)
		ok = len(c.ids) <= limit
	}
	if ok {
		for _, id := range c.ids {
			if e := a.flows[id]; e != nil {
				dst = append(dst, e.agg)
			} else {
				dst = append(dst, flowstate.Flow{ID: id})
			}
		}
	}
	c.ids, c.left, c.over, c.limit = c.ids[:0], 0, false, max(limit, 1)
	a.nextGen()
	return dst, ok
}
