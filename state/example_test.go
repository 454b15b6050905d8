package state_test

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

func ExampleManager() {
	ctx := context.Background()
	m := state.NewManager(state.Options{})

	// Two flownodes report flow 1; node 2 also runs flow 2.
	_, _ = m.Merge(ctx, state.Report{Node: 1, Flows: []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1024, LastExecTime: 1700000000000},
	}})
	_, _ = m.Merge(ctx, state.Report{Node: 2, Flows: []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 2048, LastExecTime: 1690000000000},
		{ID: 2, Has: flowstate.HasStateSize, StateSize: 10},
	}})

	s, _ := m.Snapshot(ctx, nil)
	v := s.Value()
	fmt.Println(v.StateSize, v.LastExecTimeMap)
	fmt.Printf("%s\n", flowstate.AppendJSON(nil, v.Flows()))
	// Output:
	// map[1:2048 2:10] map[1:1700000000000]
	// {"state_size":{"1":2048,"2":10},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}
}
