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
