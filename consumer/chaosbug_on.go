//go:build chaosbug

package consumer

import (
	"os"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/state"
)

// A deliberately broken worker for e2e/chaos, which proves that its
// linearizability check can fail: built with -tags chaosbug and run with
// FLOWSTATE_CHAOSBUG=1, every fourth ack names the revision before the
// write, as a worker that acked before storing would. Never in a release
// build.
var (
	chaosBug  = os.Getenv("FLOWSTATE_CHAOSBUG") == "1"
	chaosAcks atomic.Uint64
)

func chaosAck(r state.MergeResult) state.MergeResult {
	if chaosBug && r.Revision > 1 && chaosAcks.Add(1)%4 == 0 {
		r.Revision--
	}
	return r
}
