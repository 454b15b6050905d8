package state_test

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

func ExampleManager() {
	ctx := context.Background()
	store := kv.NewMemory()
	m := state.NewManager(store, state.Options{})

	// Two flownodes report flow 1; node 2 also runs flow 2.
	_, _ = m.Merge(ctx, 1, flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{1: 1024},
		LastExecTimeMap: map[flowstate.FlowID]int64{1: 1700000000000},
	})
	_, _ = m.Merge(ctx, 2, flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{1: 2048, 2: 10},
		LastExecTimeMap: map[flowstate.FlowID]int64{1: 1690000000000},
	})

	v, _, _ := m.Get(ctx)
	fmt.Println(v.StateSize, v.LastExecTimeMap)
	fmt.Printf("%s\n", store.Dump()[flowstate.StateKey])
	// Output:
	// map[1:2048 2:10] map[1:1700000000000]
	// {"state_size":{"1":2048,"2":10},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}
}
