package state

import "github.com/flowstate-io/flowstate/flowstate"

// A flow named in any map of a report counts toward Limits.MaxFlows
// (PROTOCOL.md v3, "Report fields"): the seed's maps, and processed_rows
// and last_errors. The aggregate holds the flows of the seed's maps
// (Aggregate.flows); named counts the others, so that a flow a node names
// only in its health counts as one more flow of the state, as long as some
// node names it.

// namedFlows counts, per flow, the nodes whose last report names it in its
// health (processed_rows or last_errors), and how many of those flows no
// node names in a seed map.
type namedFlows struct {
	nodes map[flowstate.FlowID]int32 // the flow's nodes that name it in their health; absent: none
	extra int                        // the flows of nodes that are not in the aggregate's flows
}

// Named returns the number of distinct flows the nodes' last reports name
// in any of their maps, as --max-total-flows counts them: the aggregate's
// flows and those named only in the nodes' health.
func (a *Aggregate) Named() int { return len(a.flows) + a.named.extra }

// joined notes that flow id entered the aggregate's flows.
func (a *Aggregate) joined(id flowstate.FlowID) {
	if a.named.nodes[id] > 0 {
		a.named.extra--
	}
}

// left notes that flow id left the aggregate's flows.
func (a *Aggregate) left(id flowstate.FlowID) {
	if a.named.nodes[id] > 0 {
		a.named.extra++
	}
}

// setHealth replaces the flows that node n names in its health with
// health (sorted by ID, each ID once; not retained beyond n.health, which
// must not change once set). Its cost is linear in the two lists.
func (a *Aggregate) setHealth(n *aggNode, health []flowstate.FlowHealth) {
	old := n.health
	if len(old) == 0 && len(health) == 0 {
		n.health = nil
		return
	}
	if a.named.nodes == nil {
		a.named.nodes = make(map[flowstate.FlowID]int32)
	}
	i, j := 0, 0
	for i < len(old) || j < len(health) {
		switch {
		case j == len(health) || (i < len(old) && old[i].ID < health[j].ID):
			a.unname(old[i].ID)
			i++
		case i < len(old) && old[i].ID == health[j].ID:
			i++
			j++
		default:
			a.name(health[j].ID)
			j++
		}
	}
	n.health = health
}

func (a *Aggregate) name(id flowstate.FlowID) {
	c := a.named.nodes[id] + 1
	a.named.nodes[id] = c
	if c == 1 && a.flows[id] == nil {
		a.named.extra++
	}
}

func (a *Aggregate) unname(id flowstate.FlowID) {
	c := a.named.nodes[id] - 1
	if c > 0 {
		a.named.nodes[id] = c
		return
	}
	delete(a.named.nodes, id)
	if a.flows[id] == nil {
		a.named.extra--
	}
}

// flowName is one flow a report names, and in which of its maps.
type flowName struct {
	id           flowstate.FlowID
	seed, health bool
}

// appendNames appends to dst the flows that flows (those with a field
// present) and health name, sorted by ID, each once. Both must be sorted
// by ID, each ID once.
func appendNames(dst []flowName, flows []flowstate.Flow, health []flowstate.FlowHealth) []flowName {
	i, j := 0, 0
	for i < len(flows) || j < len(health) {
		if i < len(flows) && canonical(flows[i]).Has == 0 {
			i++
			continue
		}
		switch {
		case j == len(health) || (i < len(flows) && flows[i].ID < health[j].ID):
			dst = append(dst, flowName{id: flows[i].ID, seed: true})
			i++
		case i < len(flows) && flows[i].ID == health[j].ID:
			dst = append(dst, flowName{id: flows[i].ID, seed: true, health: true})
			i++
			j++
		default:
			dst = append(dst, flowName{id: health[j].ID, health: true})
			j++
		}
	}
	return dst
}

// countNamed counts the distinct flows that flows (those with a field
// present) and health name, as --max-flows counts them; both sorted by ID.
func countNamed(flows []flowstate.Flow, health []flowstate.FlowHealth) int {
	n, i := 0, 0
	for _, f := range flows {
		if f.Has != 0 {
			n++
		}
	}
	for k := range health {
		id := health[k].ID
		for i < len(flows) && flows[i].ID < id {
			i++
		}
		if i == len(flows) || flows[i].ID != id || flows[i].Has == 0 {
			n++
		}
	}
	return n
}

// addedFlows returns how many flows a report of node n (nil: a node the
// aggregate does not hold) that names flows and health would add to
// Named, and how many it would take out of it (those only n names now).
func (a *Aggregate) addedFlows(n *aggNode, flows []flowstate.Flow, health []flowstate.FlowHealth) (added, removed int) {
	var oldFlows []flowstate.Flow
	var oldHealth []flowstate.FlowHealth
	if n != nil {
		oldFlows, oldHealth = n.flows, n.health
	}
	a.spareNames[0] = appendNames(a.spareNames[0][:0], oldFlows, oldHealth)
	a.spareNames[1] = appendNames(a.spareNames[1][:0], flows, health)
	old, inc := a.spareNames[0], a.spareNames[1]
	i, j := 0, 0
	for i < len(old) || j < len(inc) {
		switch {
		case j == len(inc) || (i < len(old) && old[i].id < inc[j].id):
			if a.namedOnlyBy(old[i]) {
				removed++
			}
			i++
		case i < len(old) && old[i].id == inc[j].id:
			i++
			j++
		default:
			if a.flows[inc[j].id] == nil && a.named.nodes[inc[j].id] == 0 {
				added++
			}
			j++
		}
	}
	return added, removed
}

// namedOnlyBy reports whether the node whose last report names the flow
// as name does is the only node that names it.
func (a *Aggregate) namedOnlyBy(name flowName) bool {
	others := int(a.named.nodes[name.id])
	if name.health {
		others--
	}
	if e := a.flows[name.id]; e != nil {
		others += len(e.contribs)
		if name.seed {
			others--
		}
	}
	return others == 0
}

// checkSortedHealth returns ErrUnsortedFlows unless the flows of h (nil:
// none) are sorted by ID, each ID once.
func checkSortedHealth(h *flowstate.Health) error {
	if h == nil {
		return nil
	}
	for i := 1; i < len(h.Flows); i++ {
		if h.Flows[i].ID <= h.Flows[i-1].ID {
			return ErrUnsortedFlows
		}
	}
	return nil
}

// healthFlows returns the flows of h, nil for a nil h.
func healthFlows(h *flowstate.Health) []flowstate.FlowHealth {
	if h == nil {
		return nil
	}
	return h.Flows
}
