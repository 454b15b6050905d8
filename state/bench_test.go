package state_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// mergeBenchSize is a state of nodes reports of flows flows each.
type mergeBenchSize struct{ nodes, flows int }

// The sizes of BenchmarkMerge: nodes, and flows per node. Each node owns
// distinct flows, so the aggregate holds nodes*flows flows.
var mergeBenchSizes = []mergeBenchSize{
	{10, 10},
	{100, 10},
	{1000, 10},
	{1000, 100},
	{10000, 10},
}

// mergeBenchReports returns two reports per node that differ in every
// flow's state_size and last_exec_time, so that alternating them changes the
// aggregate on every merge.
func mergeBenchReports(nodes, flows int) [2][]flowstate.FlowStateValue {
	var out [2][]flowstate.FlowStateValue
	for p := range out {
		out[p] = make([]flowstate.FlowStateValue, nodes)
		for n := range nodes {
			v := value(make(sizes, flows), make(times, flows), make(times, flows))
			for f := range flows {
				id := flowstate.FlowID(n*flows + f + 1)
				v.StateSize[id] = uint64(1<<20 + int(id)*64 + p)
				v.LastExecTimeMap[id] = 1_700_000_000_000 + int64(id)*1000 + int64(p)
				v.StartTimeMap[id] = 1_690_000_000_000 + int64(id)
			}
			out[p][n] = v
		}
	}
	return out
}

type merger interface {
	merge(ctx context.Context, nodeID uint64, v flowstate.FlowStateValue) error
}

func (n *naiveManager) fill(ctx context.Context, reports []flowstate.FlowStateValue) error {
	// Every node's report, as if merged one by one (that is quadratic:
	// hours at 10,000 nodes); the merge of node 0 writes the aggregate.
	for node, v := range reports {
		n.store[flowstate.NodeKey(uint64(node))] = encode(v)
	}
	return n.merge(ctx, 0, reports[0])
}

type managerMerger struct{ m *state.Manager }

func (mm managerMerger) merge(ctx context.Context, nodeID uint64, v flowstate.FlowStateValue) error {
	_, err := mm.m.Merge(ctx, state.Report{Node: nodeID, Flows: v.Flows()})
	return err
}

func newMerger(b *testing.B, variant string, reports []flowstate.FlowStateValue) merger {
	b.Helper()
	ctx := b.Context()
	if variant == "naive" {
		n := newNaiveManager()
		if err := n.fill(ctx, reports); err != nil {
			b.Fatal(err)
		}
		return n
	}
	m := state.NewManager(state.Options{})
	for node, v := range reports {
		if _, err := m.Merge(ctx, state.Report{Node: uint64(node), Flows: v.Flows()}); err != nil {
			b.Fatal(err)
		}
	}
	return managerMerger{m}
}

// BenchmarkMerge measures one report of a node that has reported before,
// with changed values, when every node has reported once; nodes report round
// robin. Variants:
//
//   - naive: GreptimeDB's algorithm (naiveManager): it re-reads, re-decodes and
//     re-aggregates every node's report and writes the aggregate.
//   - manager: Manager, whose aggregate is the state (nothing is written).
//
// naive takes about half a second per merge at nodes=10000/flows=10 and
// nodes=1000/flows=100 (it decodes 10,000 or 100,000 flows each time), so
// with the default -benchtime it runs only one to three merges there. Pass
// -benchtime 1x for a smoke run (one merge per benchmark), or e.g.
// -benchtime 5x to fix the naive sample size.
func BenchmarkMerge(b *testing.B) {
	for _, variant := range []string{"naive", "manager"} {
		b.Run(variant, func(b *testing.B) {
			for _, size := range mergeBenchSizes {
				name := fmt.Sprintf("nodes=%d/flows=%d", size.nodes, size.flows)
				b.Run(name, func(b *testing.B) {
					reports := mergeBenchReports(size.nodes, size.flows)
					m := newMerger(b, variant, reports[0])
					ctx := b.Context()
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						node := i % size.nodes
						round := i/size.nodes + 1 // the fill was round 0
						i++
						if err := m.merge(ctx, uint64(node), reports[round%2][node]); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkMergeFlows is BenchmarkMerge/manager on the worker's path: the
// report comes as flows, written into a reused slice just before the merge
// (as the worker's decoder does), so it is in cache; BenchmarkMerge's
// reports are prebuilt, one pair of maps per node, and at 10,000 nodes they
// are read from memory.
func BenchmarkMergeFlows(b *testing.B) { benchmarkMergeReports(b, mergeBenchSizes, false) }

// BenchmarkAppendJSON measures writing the stored form of an aggregate.
func BenchmarkAppendJSON(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			flows := mergeBenchReports(1, n)[0][0].Flows()
			buf := flowstate.AppendJSON(nil, flows)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = flowstate.AppendJSON(buf[:0], flows)
			}
		})
	}
}

// BenchmarkMergeHealth is BenchmarkMergeFlows with protocol v3's health in
// every report: per flow the rows processed and one error of 200 bytes,
// the message the same from one report to the next, as the decoder hands
// it over (a node repeats its errors).
func BenchmarkMergeHealth(b *testing.B) { benchmarkMergeReports(b, mergeBenchSizes[:3], true) }

// benchmarkMergeReports merges, for each size, every node's report in turn
// into a Manager, written into reused slices just before the merge, with
// health if withHealth.
func benchmarkMergeReports(b *testing.B, sizes []mergeBenchSize, withHealth bool) {
	message := strings.Repeat("x", 200)
	for _, size := range sizes {
		name := fmt.Sprintf("nodes=%d/flows=%d", size.nodes, size.flows)
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			m := newMerger(b, "manager", mergeBenchReports(size.nodes, size.flows)[0]).(managerMerger).m
			report := make([]flowstate.Flow, size.flows)
			health := flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: make([]flowstate.FlowHealth, size.flows)}
			errs := make([]flowstate.FlowError, size.flows)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				node := i % size.nodes
				round := i/size.nodes + 1
				i++
				for f := range report {
					id := flowstate.FlowID(node*size.flows + f + 1)
					report[f] = flowstate.Flow{
						ID:           id,
						Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
						StateSize:    uint64(1<<20 + int(id)*64 + round%2),
						LastExecTime: 1_700_000_000_000 + int64(id)*1000 + int64(round%2),
						StartTime:    1_690_000_000_000 + int64(id),
					}
					if withHealth {
						errs[f] = flowstate.FlowError{Time: report[f].LastExecTime, Message: message}
						health.Flows[f] = flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors,
							ProcessedRows: uint64(round) * 1000, LastErrors: errs[f : f+1 : f+1]}
					}
				}
				rep := state.Report{Node: uint64(node), Flows: report}
				if withHealth {
					rep.Health = &health
				}
				if _, err := m.Merge(ctx, rep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
