//go:build !chaosbug

package main

import (
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/state"
)

// chaosLocal is the memory state as the worker serves it: mgr itself. Only
// a worker built with the chaosbug tag (the robustness test's broken
// worker, chaosbug_on.go) puts a fault between the two.
func chaosLocal(mgr *state.Manager) consumer.Local { return mgr }
