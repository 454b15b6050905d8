package consumer_test

import (
	"context"
	"testing"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// BenchmarkDeltaBytes compares the bodies of one update interval as the
// worker publishes them: 10,000 flows on 1,000 nodes (10 each), 10 nodes
// reporting new times per interval; "delta_%" is the delta's body as a
// percentage of the full aggregate's (PROTOCOL.md v2 targets at most 2%).
// The time per op is the state driver's Delta and both encodings.
func BenchmarkDeltaBytes(b *testing.B) {
	ctx := context.Background()
	const nodes, flows, perInterval = 1000, 10, 10
	mgr := state.NewManager(state.Options{})
	reportOf := func(node uint64, round int) []flowstate.Flow {
		fl := make([]flowstate.Flow, flows)
		for i := range fl {
			fl[i] = flowstate.Flow{ID: flowstate.FlowID(node*flows + uint64(i) + 1), Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
				StateSize: uint64(1<<20 + round), LastExecTime: 1700000000000 + int64(round), StartTime: 1690000000000}
		}
		return fl
	}
	for node := range uint64(nodes) {
		if _, err := mgr.Merge(ctx, state.Report{Node: node, Flows: reportOf(node, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	src := mgr
	if _, err := src.Delta(ctx, nil); err != nil { // the first may be a resync
		b.Fatal(err)
	}
	var (
		dflows        []flowstate.Flow
		snap          state.Snapshot
		full, delta   []byte
		fullN, deltaN int
		round, node   int
	)
	for b.Loop() {
		round++
		for range perInterval {
			if _, err := mgr.Merge(ctx, state.Report{Node: uint64(node % nodes), Flows: reportOf(uint64(node%nodes), round)}); err != nil {
				b.Fatal(err)
			}
			node++
		}
		d, err := src.Delta(ctx, dflows)
		if err != nil || d.Resync {
			b.Fatal(err, d.Resync)
		}
		dflows = d.Flows
		if snap, err = mgr.Snapshot(ctx, snap.Flows); err != nil {
			b.Fatal(err)
		}
		delta = codec.AppendDelta(delta[:0], d.Base, d.Flows)
		full = codec.AppendAggregate(full[:0], snap.Flows)
		fullN, deltaN = fullN+len(full), deltaN+len(delta)
	}
	b.ReportMetric(float64(fullN)/float64(b.N), "full_B/op")
	b.ReportMetric(float64(deltaN)/float64(b.N), "delta_B/op")
	b.ReportMetric(100*float64(deltaN)/float64(fullN), "delta_%")
}
