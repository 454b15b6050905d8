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
	// Health is the report's v3 part: processed_rows, last_errors (flows
	// sorted by ID, each once) and seq, with Has flags for the fields that
	// were present. RetiredEpochs is never set by Decode. A decoded
	// Health shares its error lists with r's scratch: Clone it to keep it
	// past the next Decode into r.
	Health flowstate.Health

	errs []flowstate.FlowError // the backing store of Health's error lists
}

// reset empties r, keeping the capacity of its slices; flows becomes
// r.Flows.
func (r *Report) reset(flows []flowstate.Flow) {
	h := r.Health
	h.Reset()
	*r = Report{Flows: flows, Health: h, errs: r.errs[:0]}
}

// Value returns r's flows as a FlowStateValue.
func (r *Report) Value() flowstate.FlowStateValue {
	return flowstate.ValueOf(r.Flows)
}
