package codec

import "github.com/flowstate-io/flowstate/flowstate"

// MaxDepth is the deepest nesting a body may have, counting its top-level
// map as level 1. Unknown fields may hold anything up to that depth.
const MaxDepth = 32

// Report is a decoded heartbeat report.
type Report struct {
	NodeID       uint64
	NodeEpoch    uint64 // unix ms; valid when HasNodeEpoch
	HasNodeEpoch bool   // false when node_epoch is absent or nil
	// Flows is the union of the report's three maps, sorted by ID, each ID
	// once, with Has saying which maps named it (never 0 in a decoded
	// report).
	Flows []flowstate.Flow
}

// Value returns r's flows as a FlowStateValue.
func (r *Report) Value() flowstate.FlowStateValue {
	return flowstate.ValueOf(r.Flows)
}
