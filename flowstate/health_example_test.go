package flowstate_test

import (
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
)

// A node's stored value with v3 fields is the seed's JSON followed by them.
func ExampleAppendNodeJSON() {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	h := &flowstate.Health{HasProcessedRows: true, HasSeq: true, Seq: 41,
		Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasProcessedRows, ProcessedRows: 52000}}}
	fmt.Println(string(flowstate.AppendNodeJSON(nil, flows, 1700000000000, true, h)))
	// Output: {"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"node_epoch":1700000000000,"seq":41}
}

// The stats view keeps per flow the most rows of any node and the newest
// errors over all nodes.
func ExampleMergeHealth() {
	node := func(id uint64, rows uint64, errs ...flowstate.FlowError) flowstate.NodeHealth {
		return flowstate.NodeHealth{NodeID: id, Health: &flowstate.Health{HasProcessedRows: true, HasLastErrors: true,
			Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: rows, LastErrors: errs}}}}
	}
	stats := flowstate.MergeHealth(nil, []flowstate.NodeHealth{
		node(7, 52000, flowstate.FlowError{Time: 1700000000000, Message: "sink table missing"}),
		node(3, 100),
	})
	seed := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	fmt.Println(string(flowstate.AppendStatsJSON(nil, seed, stats)))
	// Output: {"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}
}
