package state_test

import (
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// BenchmarkDecodeMergeFlood decodes and merges a flood of 1,000 nodes'
// reports of 10 flows each, node after node, as the worker's heartbeat
// goroutine does on the memory backend: v2 reports, and v3 reports whose
// flows each carry processed rows and one error of 200 bytes (the
// load test's 1000x10 and 1000x10-v3). The encoded reports of four rounds
// (11 MB for v3) do not fit in a core's cache, as a flood's do not.
func BenchmarkDecodeMergeFlood(b *testing.B) {
	const nodes, flows, rounds = 1000, 10, 4
	message := strings.Repeat("x", 200)
	for _, v3 := range []bool{false, true} {
		name := "v2"
		if v3 {
			name = "v3"
		}
		b.Run(name, func(b *testing.B) {
			var bodies [][]byte
			for round := range rounds {
				for node := range nodes {
					r := codec.Report{NodeID: uint64(node + 1), NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true}
					for k := 1; k <= flows; k++ {
						id := flowstate.FlowID(node*flows + k)
						f := flowstate.Flow{ID: id, Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
							StateSize: uint64(k)<<12 + uint64(round), LastExecTime: 1_700_000_000_000 + int64(round)*1000 + int64(k),
							StartTime: 1_700_000_000_000}
						r.Flows = append(r.Flows, f)
						if v3 {
							r.Health.HasProcessedRows, r.Health.HasLastErrors = true, true
							r.Health.Flows = append(r.Health.Flows, flowstate.FlowHealth{ID: id,
								Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 1000 * uint64(round+1),
								LastErrors: []flowstate.FlowError{{Time: f.LastExecTime, Message: message}}})
						}
					}
					bodies = append(bodies, codec.AppendReport(nil, &r))
				}
			}
			m := state.NewManager(state.Options{})
			var dec codec.Decoder
			var rep codec.Report
			ctx := b.Context()
			merge := func(body []byte) {
				if err := dec.Decode(body, &rep); err != nil {
					b.Fatal(err)
				}
				sr := state.Report{Node: rep.NodeID, NodeEpoch: rep.NodeEpoch, HasNodeEpoch: rep.HasNodeEpoch, Flows: rep.Flows}
				if rep.Health.IsV3() {
					sr.Health = &rep.Health
				}
				if _, err := m.Merge(ctx, sr); err != nil {
					b.Fatal(err)
				}
			}
			for _, body := range bodies[:nodes] {
				merge(body)
			}
			b.SetBytes(int64(len(bodies[0])))
			b.ReportAllocs()
			i := nodes
			for b.Loop() {
				merge(bodies[i%len(bodies)])
				i++
			}
		})
	}
}
