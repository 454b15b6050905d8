package state_test

import (
	"fmt"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// BenchmarkAggregateShared measures one report of 10,000 flows when nodes
// nodes report the same 10,000 flows (a flow spread over many flownodes):
// the cost of a report must grow with its own flows, and at most
// logarithmically with the nodes that share them. Every report changes
// every flow's values, and moves the max of state_size to its node.
func BenchmarkAggregateShared(b *testing.B) {
	const flows = 10_000
	for _, nodes := range []int{1, 100, 2000} {
		b.Run(fmt.Sprintf("nodes=%d/flows=%d", nodes, flows), func(b *testing.B) {
			a := state.NewAggregate()
			report := make([]flowstate.Flow, flows)
			fill := func(node, round int) {
				for i := range report {
					report[i] = flowstate.Flow{
						ID:           flowstate.FlowID(i),
						Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
						StateSize:    uint64(round*nodes + node),
						LastExecTime: int64(node*7919%nodes + round),
						StartTime:    int64(node),
					}
				}
			}
			for node := range nodes {
				fill(node, 0)
				a.Apply(uint64(node), report)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				node, round := i%nodes, i/nodes+1
				i++
				b.StopTimer()
				fill(node, round)
				b.StartTimer()
				a.Apply(uint64(node), report)
			}
			a.TakeChanges(nil, flows) // the record holds what the loop changed
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/flows, "ns/flow")
		})
	}
}

// BenchmarkAggregateFlood measures the worker's path at 10,000 nodes x 10
// flows under a flood: one report checked against the worker's limits and
// applied, and every 6,000 reports (one update's worth) a take of the
// changes, which by then are more than half of the flows: a resync.
func BenchmarkAggregateFlood(b *testing.B) {
	const nodes, flows, perTake = 10_000, 10, 6_000
	lim := state.Limits{MaxNodes: nodes, MaxFlows: nodes * flows}
	a := state.NewAggregate()
	report := make([]flowstate.Flow, flows)
	fill := func(node, round int) {
		for f := range report {
			report[f] = flowstate.Flow{ID: flowstate.FlowID(node*flows + f), Has: flowstate.HasStateSize, StateSize: uint64(round)}
		}
	}
	for node := range nodes {
		fill(node, 0)
		a.Apply(uint64(node), report)
	}
	var took []flowstate.Flow
	took, _ = a.TakeChanges(took, nodes*flows/2)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		node, round := i%nodes, i/nodes+1
		i++
		fill(node, round)
		if err := a.Check(uint64(node), report, lim); err != nil {
			b.Fatal(err)
		}
		a.Apply(uint64(node), report)
		if i%perTake == 0 {
			took, _ = a.TakeChanges(took, nodes*flows/2)
		}
	}
}
