package main

import (
	"cmp"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// maxLeftNodes bounds the nodes that stopped reporting a flow's rows whose
// last count a flowRows keeps, in case they report it again.
const maxLeftNodes = 8

// rowsCounter counts the rows each watched flow processed, as a counter
// that Prometheus's rate() reads right: processed_rows is the count of a
// node's process, which starts over when the process restarts, and the
// stats view's value is the most any node reports, which goes down when
// the node holding it leaves. So the counter sums, per node, what its
// count rose by between two refreshes, within one process (one
// node_epoch), and never goes down:
//
//   - a node's count above the most it reported under its node_epoch adds
//     the difference;
//   - a count under another node_epoch is a new process's: all of it adds;
//   - a node without node_epoch whose count went down restarted: all of it
//     adds;
//   - a count that went down under the same node_epoch is a report that
//     arrived late (a v3 report without seq is applied in arrival order):
//     it adds nothing, and rows add again once the count passes the most
//     seen;
//   - a node that starts to report the flow while it is watched adds all
//     its count (it took the flow up since the last refresh); when the
//     flow is first watched, every node's count is where the counter
//     starts, at 0;
//   - a node that stops reporting the flow (it dropped it, or was evicted)
//     adds nothing; its last count is kept (for the last maxLeftNodes such
//     nodes), so that if it reports the flow again under the same
//     node_epoch only what it processed meanwhile adds.
//
// What a process processed between its last report seen at a refresh and
// its restart is not seen by any refresh, and not counted. A flow that
// stops being watched is forgotten; watched again, it starts at 0 (which
// rate() reads as a counter reset, adding nothing).
type rowsCounter struct {
	flows map[flowstate.FlowID]*flowRows
	round uint64 // the refresh being counted; counts from 1
	left  []leftNode
}

// leftNode is a node that no longer reports a flow's rows, and the last
// refresh that saw its count.
type leftNode struct{ id, seen uint64 }

// flowRows is one watched flow's count.
type flowRows struct {
	total    uint64
	reported bool // a node reported the flow's rows since it is watched
	since    uint64
	nodes    map[uint64]*nodeRows
}

// nodeRows is what the counter knows of one node's count of a flow.
type nodeRows struct {
	epoch    uint64
	hasEpoch bool
	most     uint64 // the most rows the node reported under epoch
	seen     uint64 // the last refresh that saw its count
}

func newRowsCounter() rowsCounter {
	return rowsCounter{flows: make(map[flowstate.FlowID]*flowRows)}
}

// refresh counts the rows that nodes report for the watched flows, and
// sets each watched flow's counts; it forgets the flows no longer watched.
func (c *rowsCounter) refresh(watched []flowWatch, nodes []state.NodeHealth) {
	c.round++
	index := make(map[flowstate.FlowID]*flowRows, len(watched))
	for i := range watched {
		w := &watched[i]
		fr := c.flows[w.id]
		if fr == nil {
			fr = &flowRows{since: c.round, nodes: make(map[uint64]*nodeRows)}
		}
		index[w.id] = fr
		w.counts = fr
	}
	c.flows = index
	for _, n := range nodes {
		for _, f := range n.Health.Flows {
			if f.Has&flowstate.HasProcessedRows == 0 {
				continue
			}
			if fr := index[f.ID]; fr != nil {
				fr.observe(c.round, n, f.ProcessedRows)
			}
		}
	}
	for _, fr := range index {
		c.left = fr.forgetLeft(c.left[:0], c.round)
	}
}

// observe counts node n's report of rows at refresh.
func (fr *flowRows) observe(refresh uint64, n state.NodeHealth, rows uint64) {
	fr.reported = true
	e := fr.nodes[n.NodeID]
	switch {
	case e == nil:
		e = &nodeRows{}
		fr.nodes[n.NodeID] = e
		if fr.since != refresh {
			fr.total += rows // a node new to the flow: all its rows are new
		}
		e.most = rows
	case e.hasEpoch != n.HasNodeEpoch || e.epoch != n.NodeEpoch:
		fr.total += rows // a new process
		e.most = rows
	case rows > e.most:
		fr.total += rows - e.most
		e.most = rows
	case rows < e.most && !n.HasNodeEpoch:
		fr.total += rows // no node_epoch: a count that went down restarted
		e.most = rows
	}
	e.epoch, e.hasEpoch, e.seen = n.NodeEpoch, n.HasNodeEpoch, refresh
}

// forgetLeft keeps the last counts of at most maxLeftNodes nodes that no
// longer report the flow's rows, forgetting those that stopped first; left
// is scratch space, returned for reuse.
func (fr *flowRows) forgetLeft(left []leftNode, refresh uint64) []leftNode {
	for id, e := range fr.nodes {
		if e.seen != refresh {
			left = append(left, leftNode{id: id, seen: e.seen})
		}
	}
	if len(left) <= maxLeftNodes {
		return left
	}
	slices.SortFunc(left, func(a, b leftNode) int {
		return cmp.Or(cmp.Compare(a.seen, b.seen), cmp.Compare(a.id, b.id))
	})
	for _, n := range left[:len(left)-maxLeftNodes] {
		delete(fr.nodes, n.id)
	}
	return left
}
