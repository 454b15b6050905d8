package flowstate_test

import (
	"maps"

	"github.com/flowstate-io/flowstate/flowstate"
)

type (
	sizes = map[flowstate.FlowID]uint64 // a state_size map
	times = map[flowstate.FlowID]int64  // a last_exec_time_map or start_time_map
)

// value builds a FlowStateValue whose maps are never nil, so that values
// compare equal to what DecodeValue returns.
func value(s sizes, lastExec, start times) flowstate.FlowStateValue {
	v := flowstate.ValueOf(nil)
	maps.Copy(v.StateSize, s)
	maps.Copy(v.LastExecTimeMap, lastExec)
	maps.Copy(v.StartTimeMap, start)
	return v
}

// encode is the stored form of v.
func encode(v flowstate.FlowStateValue) []byte { return flowstate.AppendJSON(nil, v.Flows()) }
