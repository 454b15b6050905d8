package state

import "github.com/flowstate-io/flowstate/flowstate"

// Report is one node's report as a state takes it, in either mode
// (Manager.Merge, Replica.Submit).
type Report struct {
	// Node is the node the report is of.
	Node uint64
	// NodeEpoch names the node's process, when HasNodeEpoch: a node_epoch
	// the report carried.
	NodeEpoch    uint64
	HasNodeEpoch bool
	// Flows are the report's flows, sorted by ID, each ID once
	// (ErrUnsortedFlows otherwise). A state does not retain them.
	Flows []flowstate.Flow
	// Health is the report's v3 part, nil if it has none: its seq (with a
	// node_epoch, a report not newer than the one held is stale, ErrStale)
	// and its flows' health. A state copies what it keeps of it.
	Health *flowstate.Health
}

// carriesV3 reports whether rep has a field of protocol v3: its node key
// then holds those fields beside GreptimeDB's value.
func (rep *Report) carriesV3() bool { return rep.Health.IsV3() }

// seq returns rep's seq, and whether it has one.
func (rep *Report) seq() (uint64, bool) {
	if rep.Health == nil {
		return 0, false
	}
	return rep.Health.Seq, rep.Health.HasSeq
}
