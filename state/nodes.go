package state

import (
	"cmp"
	"slices"
	"time"
)

// NodeInfo describes one node whose report is part of the aggregate.
type NodeInfo struct {
	ID         uint64
	LastReport time.Time // when its last report was applied (or stored, on a Replica)
	Flows      int       // flows in its last report
	// NodeEpoch is the node_epoch the state holds for the node, if
	// HasNodeEpoch: a Manager's is its last report's; a Replica's is what
	// the node's stored value carries (a report without v3 fields keeps
	// its node_epoch there only beside retired ones), so that every worker
	// shows the same at one revision.
	NodeEpoch    uint64
	HasNodeEpoch bool
}

// copyNodes copies agg's nodes, with the time of each one's last report
// and its node_epoch (info fills both), unsorted: the caller holds its
// lock for this copy only.
func copyNodes(agg *Aggregate, info func(n *NodeInfo)) []NodeInfo {
	n, _ := agg.Len()
	out := make([]NodeInfo, 0, n)
	for id, flows := range agg.Nodes() {
		out = append(out, NodeInfo{ID: id, Flows: len(flows)})
		info(&out[len(out)-1])
	}
	return out
}

// sortNodes sorts nodes by ID.
func sortNodes(nodes []NodeInfo) {
	slices.SortFunc(nodes, func(a, b NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
}
