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
}

// copyNodes copies agg's nodes, with the time of each one's last report,
// unsorted: the caller holds its lock for this copy only.
func copyNodes(agg *Aggregate, seen func(id uint64) time.Time) []NodeInfo {
	n, _ := agg.Len()
	out := make([]NodeInfo, 0, n)
	for id, flows := range agg.Nodes() {
		out = append(out, NodeInfo{ID: id, LastReport: seen(id), Flows: len(flows)})
	}
	return out
}

// sortNodes sorts nodes by ID.
func sortNodes(nodes []NodeInfo) {
	slices.SortFunc(nodes, func(a, b NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
}
