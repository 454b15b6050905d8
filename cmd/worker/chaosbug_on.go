//go:build chaosbug

package main

import (
	"context"
	"os"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/state"
)

// A deliberately broken worker for e2e/chaos, which proves that its
// linearizability check can fail: built with -tags chaosbug and run with
// FLOWSTATE_CHAOSBUG=1 (--kv memory), every fourth report is acknowledged
// with the revision before its own, as a worker that acked before storing
// would. The fault sits between the wiring and the state; nothing of it is
// in a release build.
func chaosLocal(mgr *state.Manager) consumer.Local {
	if os.Getenv("FLOWSTATE_CHAOSBUG") != "1" {
		return mgr
	}
	return &brokenLocal{Manager: mgr}
}

// brokenLocal is a Manager whose every fourth result names the revision
// before its own.
type brokenLocal struct {
	*state.Manager
	merges atomic.Uint64
}

func (b *brokenLocal) Merge(ctx context.Context, rep state.Report) (state.MergeResult, error) {
	res, err := b.Manager.Merge(ctx, rep)
	if err == nil && res.Revision > 1 && b.merges.Add(1)%4 == 0 {
		res.Revision--
	}
	return res, err
}
