package state

import "github.com/flowstate-io/flowstate/flowstate"

// admit is the one check of a report before it changes the state, a
// Manager's or a Replica's: its flows and its health's flows sorted by ID,
// each ID once; not stale against held, the lineage of the node's report
// as the state knows it (nil: none); and the state within lim once the
// report replaces the node's: n is the aggregate's entry of the node (nil:
// a node it does not hold), errors the errors the state holds, old those
// of the report it replaces. It returns the report's health as the state
// keeps it. Its cost is linear in the report and the node's last report.
func (a *Aggregate) admit(rep *Report, held *lineage, n *aggNode, errors, old errorLoad, lim Limits) (*flowstate.Health, error) {
	if err := checkSorted(rep.Flows); err != nil {
		return nil, err
	}
	if err := checkSortedHealth(rep.Health); err != nil {
		return nil, err
	}
	if err := held.stale(rep.Node, rep); err != nil {
		return nil, err
	}
	health := keepHealthOf(rep)
	if err := a.checkNode(n, rep.Flows, healthFlows(health), lim); err != nil {
		return nil, err
	}
	return health, checkErrors(errors, old, loadOf(health), lim)
}

// Check returns nil if applying a report of nodeID made of flows, without
// v3 fields, keeps the aggregate within lim, and a *CapacityError
// otherwise (checkNode).
func (a *Aggregate) Check(nodeID uint64, flows []flowstate.Flow, lim Limits) error {
	return a.checkNode(a.nodes[nodeID], flows, nil, lim)
}

// checkNode returns nil if applying a report of the node n (nil for a node
// that the aggregate does not hold) made of flows, and of health (the
// flows its v3 maps name), keeps the aggregate within lim, and a
// *CapacityError otherwise. Every flow named in any map counts toward
// lim.MaxFlows (Named). A report that adds no node and does not grow the
// number of flows past the limit passes even when the aggregate is already
// past it. Its cost is linear in the report and the node's last report.
// flows and health must be sorted by ID, each ID once.
func (a *Aggregate) checkNode(n *aggNode, flows []flowstate.Flow, health []flowstate.FlowHealth, lim Limits) error {
	if n == nil && lim.MaxNodes > 0 && len(a.nodes) >= lim.MaxNodes {
		return &CapacityError{Limit: LimitMaxNodes, Max: lim.MaxNodes, Would: len(a.nodes) + 1}
	}
	now := a.Named()
	if lim.MaxFlows <= 0 || now+len(flows)+len(health) <= lim.MaxFlows {
		return nil // a report adds at most one flow per flow of its own
	}
	added, removed := a.addedFlows(n, flows, health)
	would := now + added - removed
	if would > lim.MaxFlows && would > now {
		return &CapacityError{Limit: LimitMaxTotalFlows, Max: lim.MaxFlows, Would: would}
	}
	return nil
}
