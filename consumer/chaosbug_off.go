//go:build !chaosbug

package consumer

import "github.com/flowstate-io/flowstate/state"

// chaosAck returns the version an ack names: the result's. Only a worker
// built with the chaosbug tag (the robustness test's broken worker, see
// chaosbug_on.go) changes it.
func chaosAck(r state.MergeResult) state.MergeResult { return r }
