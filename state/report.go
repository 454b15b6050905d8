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
	// Seq numbers the report within its process, when HasSeq: with a
	// node_epoch, a report that is not newer than the one held is stale
	// (ErrStale).
	Seq    uint64
	HasSeq bool
	// Flows are the report's flows, sorted by ID, each ID once
	// (ErrUnsortedFlows otherwise). A state does not retain them.
	Flows []flowstate.Flow
}

// carriesV3 reports whether rep has a field of protocol v3: its node key
// then holds those fields beside GreptimeDB's value.
func (rep *Report) carriesV3() bool { return rep.HasSeq }
