package state

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// TestAggregateNamedMatchesABruteForceCount applies random reports whose
// seed maps and health name overlapping flows, and removes nodes; after
// each step Named is the number of distinct flows the nodes name in any
// map, and checkNode refuses a random report exactly when it would take
// that count past the limit and above what it is.
func TestAggregateNamedMatchesABruteForceCount(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const flowIDs, nodes = 12, 4
	a := NewAggregate()
	names := map[uint64]map[flowstate.FlowID]bool{} // node -> flows it names
	count := func(over map[uint64]map[flowstate.FlowID]bool) int {
		all := map[flowstate.FlowID]bool{}
		for _, ids := range over {
			for id := range ids {
				all[id] = true
			}
		}
		return len(all)
	}
	randomReport := func() ([]flowstate.Flow, []flowstate.FlowHealth, map[flowstate.FlowID]bool) {
		var flows []flowstate.Flow
		for id := range flowstate.FlowID(flowIDs) {
			if r.IntN(flowIDs) < 4 { // some with no field: not named
				flows = append(flows, flowstate.Flow{ID: id, Has: flowstate.Fields(r.IntN(4)), LastExecTime: 1})
			}
		}
		var health []flowstate.FlowHealth
		for id := range flowstate.FlowID(flowIDs) {
			if r.IntN(flowIDs) < 3 {
				health = append(health, flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows})
			}
		}
		named := map[flowstate.FlowID]bool{}
		for _, f := range flows {
			if canonical(f).Has != 0 {
				named[f.ID] = true
			}
		}
		for _, h := range health {
			named[h.ID] = true
		}
		return flows, health, named
	}
	for step := range 5000 {
		node := uint64(r.IntN(nodes))
		if r.IntN(10) == 0 {
			a.Remove(node)
			delete(names, node)
		} else {
			flows, health, named := randomReport()
			a.applyNode(node, a.nodes[node], flows, health)
			names[node] = named
		}
		require.Equal(t, count(names), a.Named(), "step %d", step)

		flows, health, named := randomReport()
		limit := 1 + r.IntN(flowIDs)
		after := map[uint64]map[flowstate.FlowID]bool{}
		for n, ids := range names {
			after[n] = ids
		}
		after[node] = named
		would, now := count(after), count(names)
		err := a.checkNode(a.nodes[node], flows, health, Limits{MaxFlows: limit})
		require.Equal(t, would > limit && would > now, err != nil, "step %d: %d flows, %d after the report, limit %d", step, now, would, limit)
	}
}
